"""UMD portability layer: the NvDla* interface and its ports (in-process, Linux)."""
