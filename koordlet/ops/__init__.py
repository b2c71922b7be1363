"""The operator's surface: the configuration (options and upstream's flags), the agent's own Prometheus metrics,
the audit log and the HTTP server. Above the host layer, below everything that decides."""
