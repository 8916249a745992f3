"""The governance report: ``read`` takes the output topics, ``messages`` decodes them,
``window``, ``evidence``, ``overview`` and ``user`` aggregate (pure), ``plots``, ``page``,
``html`` and ``html_user`` render, ``build`` ties them together for the CLI."""
