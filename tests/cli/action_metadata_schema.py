"""A JSON Schema of GitHub Action metadata (action.yml), written for this suite from
GitHub's "Metadata syntax for GitHub Actions" reference
(https://docs.github.com/en/actions/reference/workflows-and-actions/metadata-syntax):
the top-level keys, inputs, outputs (a composite action's carry ``value``), branding and
the three ``runs`` kinds, with a composite step being either ``run`` + ``shell`` or
``uses``. Stricter than GitHub where the reference says a key is required.
"""

from __future__ import annotations

from typing import Any

_ID = "^[_a-zA-Z][a-zA-Z0-9_-]*$"
# The colours the reference lists for branding.color.
BRANDING_COLORS = ["white", "black", "yellow", "blue", "green", "orange", "red", "purple",
                   "gray-dark"]

_STEP_COMMON: dict[str, Any] = {
    "id": {"type": "string", "pattern": _ID},
    "name": {"type": "string"},
    "if": {"type": ["string", "boolean"]},
    "env": {"type": "object", "additionalProperties": {"type": ["string", "number", "boolean"]}},
    "continue-on-error": {"type": ["string", "boolean"]},
    "working-directory": {"type": "string"},
}

ACTION_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["name", "description", "runs"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "author": {"type": "string"},
        "description": {"type": "string", "minLength": 1},
        "inputs": {
            "type": "object",
            "propertyNames": {"pattern": _ID},
            "additionalProperties": {
                "type": "object",
                "required": ["description"],
                "additionalProperties": False,
                "properties": {
                    "description": {"type": "string"},
                    "required": {"type": "boolean"},
                    "default": {"type": "string"},
                    "deprecationMessage": {"type": "string"},
                },
            },
        },
        "outputs": {
            "type": "object",
            "propertyNames": {"pattern": _ID},
            "additionalProperties": {
                "type": "object",
                "required": ["description"],
                "additionalProperties": False,
                "properties": {"description": {"type": "string"}, "value": {"type": "string"}},
            },
        },
        "branding": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"icon": {"type": "string"}, "color": {"enum": BRANDING_COLORS}},
        },
        "runs": {
            "type": "object",
            "required": ["using"],
            "oneOf": [
                {
                    "properties": {
                        "using": {"const": "composite"},
                        "steps": {
                            "type": "array",
                            "minItems": 1,
                            "items": {
                                "oneOf": [
                                    {
                                        "type": "object",
                                        "required": ["run", "shell"],
                                        "additionalProperties": False,
                                        "properties": {
                                            **_STEP_COMMON,
                                            "run": {"type": "string"},
                                            "shell": {"type": "string"},
                                        },
                                    },
                                    {
                                        "type": "object",
                                        "required": ["uses"],
                                        "additionalProperties": False,
                                        "properties": {
                                            **_STEP_COMMON,
                                            "uses": {"type": "string", "pattern": ".+@.+"},
                                            "with": {"type": "object"},
                                        },
                                    },
                                ]
                            },
                        },
                    },
                    "required": ["steps"],
                },
                {"properties": {"using": {"pattern": "^node\\d+$"}}, "required": ["main"]},
                {"properties": {"using": {"const": "docker"}}, "required": ["image"]},
            ],
        },
    },
}
