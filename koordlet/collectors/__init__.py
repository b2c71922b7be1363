"""Collectors: read usage through koordlet.host and turn it into metric-cache samples."""
