"""Python modules generated from the .proto sources in the repository's ``proto/`` directory (``make proto``).

Do not edit the ``*_pb2*.py`` / ``*_pb2*.pyi`` files: ``proto/generate.py`` writes them and ``tests/unit/test_proto.py``
checks they are exactly what it writes. They live under ``koordlet`` rather than in a top-level ``proto`` package,
which is proto-plus's (installed by many Google client libraries).
"""
