"""Where instances come from. Implementations depend only on ``providers.base`` and the leaf modules."""
