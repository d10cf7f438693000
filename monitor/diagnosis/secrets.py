"""Masking credentials that jobs print (env dumps, HTTP headers) or are given (command lines,
environments) before they reach a report or a file beside the log."""

from __future__ import annotations

import regex

MASK = "****"

_SECRETS = regex.compile(
    r"(?P<keep>\b(?:WANDB_API_KEY|HF_TOKEN|HUGGING_FACE_HUB_TOKEN|HUGGINGFACE_TOKEN|"
    r"AWS_SECRET_ACCESS_KEY|aws_secret_access_key|AWS_SESSION_TOKEN|aws_session_token|"
    r"[A-Za-z_]*(?:API_KEY|api_key|_KEY|_key|TOKEN|token|SECRET|secret|PASSWORD|password))"
    r"""['"]?\s*[:=]\s*['"]?)(?P<secret>[^\s'",;]{4,})"""
    r"|(?P<keep2>\b(?i:bearer)\s+)(?P<secret2>[A-Za-z0-9._~+/=-]{8,})"
    # A password in a URL: https://user:password@host.
    r"|(?P<keep3>\b[A-Za-z][A-Za-z0-9+.-]*://[^\s/:@]+:)(?P<secret3>[^\s/@]+)(?=@)"
    # A command-line option that takes a credential: --hf-token VALUE, --api-key=VALUE.
    r"|(?P<keep4>(?<![\w-])--?[\w-]*(?i:token|key|secret|password)(?:=|\s+))(?P<secret4>[^\s'\"-][^\s'\"]*)"
    r"|\bhf_[A-Za-z0-9]{20,}"
    r"|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"
)
# An argument that is a credential option whose value is the next argument.
_SECRET_OPTION = regex.compile(r"--?[\w-]*(?i:token|key|secret|password)")


def _replace(match: regex.Match) -> str:
    for keep in ("keep", "keep2", "keep3", "keep4"):
        if match[keep] is not None:
            return match[keep] + MASK
    return MASK


def mask(text: str) -> str:
    """``text`` with API keys, tokens, bearer credentials, URL passwords, credential options and
    AWS keys replaced by ``****``."""
    return _SECRETS.sub(_replace, text)


def mask_args(args: list[str]) -> list[str]:
    """A command line with its credentials masked: ``KEY=value`` arguments, and the argument
    after an option such as ``--hf-token``."""
    masked: list[str] = []
    for index, arg in enumerate(args):
        if index and _SECRET_OPTION.fullmatch(args[index - 1]) and not arg.startswith("-"):
            masked.append(MASK)
        else:
            masked.append(mask(arg))
    return masked


def mask_data(value):
    """JSON-like data (dicts, lists, strings) with every string masked and every list of strings
    read as a command line."""
    if isinstance(value, str):
        return mask(value)
    if isinstance(value, dict):
        return {key: mask_data(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        if all(isinstance(item, str) for item in value):
            return mask_args(list(value))
        return [mask_data(item) for item in value]
    return value
