"""A worker's Kafka I/O besides its consumer loop: checkpoints in order (``checkpoints``),
outputs published (``publish``, through aiokafka's or librdkafka's producer: ``producers``),
each partition's changelog (``changelog``), which worker owns which partition (``owners``),
record batches read by hand (``batches``), and whether the broker answers
(``broker_watch``)."""
