"""The Linux uAPI: what the client port (:mod:`pydla.portability.linux`) and the KMD daemon
(:mod:`pydla.linux`) share, and nothing of either side.

- :mod:`.ioctl`: the ioctl commands (``_IOWR('d', nr, struct)`` over the generated ``dla_uapi``
  structs) and the errno <-> NvError mapping;
- :mod:`.ring`: the layout of a submission ring and the one way its header words are accessed;
- :mod:`.shm`: the sealed memfd a client creates for a buffer object and the daemon checks.

It imports only the generated binary contracts and :mod:`pydla.errors`, so a client that opens
``/dev/dla0`` loads neither the daemon nor its FUSE server.

Usage::

    from pydla.uapi.ioctl import COMMANDS
    from pydla.uapi.shm import SharedBuffer
"""
