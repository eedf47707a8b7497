"""Kernel-mode driver: contexts, buffer objects, jobs, fences, recovery and the KMD portability side;
its engine scheduler is firmware (:mod:`pydla.firmware`)."""
