"""Pure domain: specs, statuses, validation rules, update diff, events. No I/O, no clock, no randomness."""
