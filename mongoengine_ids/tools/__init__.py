"""The command-line tools: ``mongoengine-ids demo``, ``inspect``, ``counters``, ``bench`` and
``compare``, and the shard simulator behind ``compare``.

The library never imports this package (a test checks it): using the fields costs nothing of it.
"""
