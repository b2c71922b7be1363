"""The only code that touches the kernel: every path is resolved under configurable host roots."""
