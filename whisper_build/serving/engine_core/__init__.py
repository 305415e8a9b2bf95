"""The engine core: the engine and its scheduler in a process of their own, fed over ZMQ by the Triton stub.

``core`` (the process), ``client`` (the stub's side: one receiver, one sender, one sweeper), ``wire``
(the messages), ``process`` (how it is started), ``gauges`` (its metrics on Triton's port), ``echo`` (a benchmark double).
Docs: docs/engines.md, "The engine core".
"""
