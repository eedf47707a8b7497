"""Binary contracts: declared once in YAML, generated into Python ctypes, C and C++.

The generated Python modules (``pydla.deviceapi.generated``) and the runtime helpers need only the
standard library; loading specs and rendering them needs the ``codegen`` extra (jinja2, pyyaml,
jsonschema).
"""
