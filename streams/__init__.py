"""Kafka, HTTP and the CLI: the I/O shell around the pure `drift` core."""
