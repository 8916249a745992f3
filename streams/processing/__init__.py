"""A worker's processing, between the consumer loop and the core: records in, the fold
stepped and effects out (``engine``), the users held and what may be stored (``memory``),
the silent replay after a restore (``rebuild``), a step's effects carried out
(``carry_out``), the engine's metrics moved once a batch (``meter``), and the records and
messages that pass in and out (``records``)."""
