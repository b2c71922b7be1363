"""The one writer of kernel state (cgroups, sysctls, /proc files): cached, read-compare-write, ordered, audited."""
