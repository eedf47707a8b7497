"""Code flatc generates from pydla/loadable/nvdla/schema/loadable.fbs (tools/regenerate)."""
