"""Build a device-API command, send it as bytes, answer it, and check the peer's version.

Run: python examples/device_api_roundtrip.py
"""

from pydla.deviceapi.generated import device_api as api
from pydla.deviceapi.runtime import Dispatcher, decode
from pydla.deviceapi.version import ContractVersion, check_compatible


def firmware() -> Dispatcher:
    """A stand-in for the device's microcontroller: answers the version query."""
    d = Dispatcher(api.API)

    @d.on(api.version_query_cmd)
    def version(cmd: api.version_query_cmd) -> api.version_query_rsp:
        major, minor, patch = api.VERSION
        v = api.api_version_t(layout_hash=api.LAYOUT_HASH64, major=major, minor=minor, patch=patch)
        return api.version_query_rsp.answer(cmd, api=v, hw_version=0x00010000, num_blocks=6)

    return d


def main() -> None:
    wire = bytes(api.version_query_cmd.new(tag=1))
    print(f"host -> device: {len(wire)} bytes  {wire.hex()}")
    reply_bytes = bytes(firmware().dispatch(wire))
    print(f"device -> host: {len(reply_bytes)} bytes")
    reply = decode(api.API, reply_bytes)
    print(reply)
    peer = ContractVersion("device_api", (reply.api.major, reply.api.minor, reply.api.patch),
                           reply.api.layout_hash)
    result = check_compatible(ContractVersion.of(api.API), peer, local_role="host", peer_role="device")
    print(f"version check: {result.value}")


if __name__ == "__main__":
    main()
