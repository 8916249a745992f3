"""The edge, where bytes meet the core's typed values: FHR records decoded and checked
(``codec``, their msgspec Structs in ``fhr_schema``), why a record is refused
(``rejection``), tick records (``tick``), and outputs encoded once as their topics'
messages (``wire``, the messages' Structs in ``formats``)."""
