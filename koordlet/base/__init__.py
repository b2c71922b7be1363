"""The vocabulary and helpers every layer uses: wire names, quantities, logging, operator YAML files, the
garbage collector's tuning. Imports nothing else of koordlet."""
