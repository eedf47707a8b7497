"""User-mode driver: IRuntime, ISync, ILoadable and the run-recipe runner (issue: the UMD)."""
