"""Kernel-mode driver: contexts, jobs, the engine scheduler and the KMD portability side."""
