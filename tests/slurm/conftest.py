"""Lets tests in this folder import the test-only namespace harness (ns_cluster)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
