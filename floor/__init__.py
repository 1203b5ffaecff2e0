"""The floor every app stands on; it imports no app (tests/test_layers.py checks it).

- protocol: the wire's vocabulary: tags, replies (Reply, ok, the not-found answers), paging, IdField
- rows: hand-written statements for the hot paths, SQL built once per model
- functions: statements sent together, run as one PL/pgSQL function made of their text (PostgreSQL)
- transactions: one operation in one transaction (or one statement), retried when it loses a race
- clock: now_ms, the server's time in milliseconds
- conf: the RESONATE settings block, every default once
- counters: the Prometheus counters every process keeps (the /metrics view is resonate_site.metrics)
- loops: the one background loop (the sweeper, the delivery pass, the commands' --loop)
- schema: migration upkeep Django cannot express (dropping the LIKE indexes that byte-wise ids do not need)
"""
