"""Masking credentials that jobs print (env dumps, HTTP headers) before they reach a report."""

from __future__ import annotations

import regex

MASK = "****"

_SECRETS = regex.compile(
    r"(?P<keep>\b(?:WANDB_API_KEY|HF_TOKEN|HUGGING_FACE_HUB_TOKEN|HUGGINGFACE_TOKEN|"
    r"AWS_SECRET_ACCESS_KEY|aws_secret_access_key|AWS_SESSION_TOKEN|aws_session_token|"
    r"[A-Za-z_]*(?:API_KEY|api_key|TOKEN|token|SECRET|secret|PASSWORD|password))"
    r"""['"]?\s*[:=]\s*['"]?)(?P<secret>[^\s'",;]{4,})"""
    r"|(?P<keep2>\bBearer\s+)(?P<secret2>[A-Za-z0-9._~+/=-]{8,})"
    r"|\bhf_[A-Za-z0-9]{20,}"
    r"|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"
)


def _replace(match: regex.Match) -> str:
    if match["keep"] is not None:
        return match["keep"] + MASK
    if match["keep2"] is not None:
        return match["keep2"] + MASK
    return MASK


def mask(text: str) -> str:
    """``text`` with API keys, tokens, bearer credentials and AWS keys replaced by ``****``."""
    return _SECRETS.sub(_replace, text)
