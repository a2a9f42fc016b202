"""Use cases: validate, record desired state and events, wake the reconciler, return. Never touches nodes."""
