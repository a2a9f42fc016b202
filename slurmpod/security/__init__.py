"""Secrets slurmpod keeps on its state directory: API access keys (``credentials``) and the Secrets Manager
equivalent (``secrets``), both owner-only files written through ``slurmpod.files``."""
