"""What the tests and the benches start from: states reached through the engine's own transitions, long
step histories written in bulk, and the recovery commands a client sends for them.

The product never imports this package; the tests and the benches both do, so neither keeps a copy.
"""
