"""The composition root's parts: what joins the layers, which no layer may do for itself.

:mod:`pydla.platform` builds devices, their drivers and the ports; the in-process driver's port over
the virtual device (:class:`~pydla.composition.virtual_port.VirtualDevicePort`) lives here beside it,
the one module that knows both the device (:mod:`pydla.hw`) and the driver's interface to it
(:mod:`pydla.kmd.port`). Nothing below the composition root imports this package.

Usage::

    from pydla.composition.virtual_port import VirtualDevicePort
    kmd = Kmd(VirtualDevicePort(VirtualDevice("full")))
"""
