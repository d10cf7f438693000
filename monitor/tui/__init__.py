"""The Textual UI (the only package that imports textual). Entry points import the app lazily."""

from __future__ import annotations
