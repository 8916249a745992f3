"""The pure core: every number the service computes, with no I/O.

Time, configuration and random generators come in as arguments.
"""
