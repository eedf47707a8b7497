"""ELF tooling: control-code and kernel ELF readers (pyelftools) and an ELF writer."""
