"""Device descriptions: what a device configuration says, read alike by the compiler, the loadable
tools, the KMD and the virtual device (none of which this package imports).

- :mod:`.config`: a configuration (``configs/*.json``, or a file of the same form): blocks,
  precisions, memory and address spaces, the architecture's per-operation limits, the compiler's
  speed rules; :func:`~pydla.target.config.load_config`, :func:`~pydla.target.config.parse_config`;
- :mod:`.ip_layout`: its compute units, as XRT's IP_LAYOUT declares them;
- :mod:`.cu_model`: the compute-unit model interface an IP_LAYOUT entry is checked against;
- :mod:`.shave`: its SHAVE tiles.

It imports only the generated contracts, :mod:`pydla.errors`, the standard library and numpy.

Usage::

    from pydla.target.config import load_config
    cfg = load_config("small"); cfg.has_block("RUBIK")   # False
"""
