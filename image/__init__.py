"""The agent's container image without a registry (``make image``): image/build.py. Not packaged."""
