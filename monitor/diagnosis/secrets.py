"""Masking credentials that jobs print (env dumps, HTTP headers) or are given (command lines,
environments) before they reach a report or a file beside the log."""

from __future__ import annotations

import regex

MASK = "****"

# Option names and variable names that hold a credential.
_CREDENTIAL = r"token|key|secret|password|passwd|pass|pwd|pw|auth|credentials?"
_SECRETS = regex.compile(
    r"(?P<keep>\b(?:WANDB_API_KEY|HF_TOKEN|HUGGING_FACE_HUB_TOKEN|HUGGINGFACE_TOKEN|"
    r"AWS_SECRET_ACCESS_KEY|aws_secret_access_key|AWS_SESSION_TOKEN|aws_session_token|"
    # ``PWD`` alone is the shell's working folder, not a password: only ``_PWD``, ``_PASS``.
    r"[A-Za-z_]*(?:API_KEY|api_key|_KEY|_key|TOKEN|token|SECRET|secret|PASSWORD|password|PASSWD|passwd|"
    r"_PASS|_pass|_PWD|_pwd))"
    r"""['"]?\s*[:=]\s*['"]?)(?P<secret>[^\s'",;]{4,})"""
    # HTTP authorization: "Authorization: Bearer X", "Basic X" (base64 of user:password).
    r"|(?P<keep2>\b(?i:bearer|basic)\s+)(?P<secret2>[A-Za-z0-9._~+/=-]{8,})"
    # A password in a URL: https://user:password@host.
    r"|(?P<keep3>\b[A-Za-z][A-Za-z0-9+.-]*://[^\s/:@]+:)(?P<secret3>[^\s/@]+)(?=@)"
    # A command-line option that takes a credential: --hf-token VALUE, --api-key=VALUE, --passwd X.
    rf"|(?P<keep4>(?<![\w-])--?[\w-]*(?i:{_CREDENTIAL})(?:=|\s+))(?P<secret4>[^\s'\"-][^\s'\"]*)"
    r"|\bhf_[A-Za-z0-9]{20,}"
    r"|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"
    # Well-known token prefixes: OpenAI (sk-, sk-proj-), GitHub (ghp_, gho_, ghs_, github_pat_),
    # Slack (xoxb-, xoxa-, xoxp-), GitLab (glpat-).
    r"|\b(?:sk-[A-Za-z0-9_-]{20,}|gh[opsu]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{20,}"
    r"|xox[abp]-[A-Za-z0-9-]{10,}|glpat-[A-Za-z0-9_-]{20,})"
)
# An argument that is a credential option whose value is the next argument.
_SECRET_OPTION = regex.compile(rf"--?[\w-]*(?i:{_CREDENTIAL})")
# Options given user:password (curl -u, --user): the part after the colon is the secret.
_USER_OPTION = {"-u", "--user", "--proxy-user", "-U"}
# -p with a password (mysql -pSECRET, sshpass -p SECRET); -p 22 or -p8080:80 are ports.
_GLUED_PASSWORD = regex.compile(r"-p(?P<secret>\S+)")
_PASSWORD_LIKE = regex.compile(r"(?![\d:.]+$)[^-]\S*")
# What looks like the next option rather than a value: --name[=...] or a one-letter -x.
_NEXT_OPTION = regex.compile(r"--[A-Za-z][\w-]*(?:=.*)?|-[A-Za-z]")


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
    """A command line with its credentials masked: ``KEY=value`` arguments, the argument after an
    option such as ``--hf-token`` or ``--passwd``, the password of ``-u user:password``, a password
    glued to ``-p``, and tokens known by their prefix."""
    masked: list[str] = []
    for index, arg in enumerate(args):
        before = args[index - 1] if index else ""
        if index and _SECRET_OPTION.fullmatch(before) and not _NEXT_OPTION.fullmatch(arg):
            masked.append(MASK)  # a value may start with "-": a token is no option
        elif before in _USER_OPTION and ":" in arg:
            masked.append(arg.split(":", 1)[0] + ":" + MASK)
        elif index and ((before == "-p" and _PASSWORD_LIKE.fullmatch(arg)) or
                        ((glued := _GLUED_PASSWORD.fullmatch(arg)) and _PASSWORD_LIKE.fullmatch(glued["secret"]))):
            masked.append(MASK if before == "-p" else "-p" + MASK)  # mysql -pX, sshpass -p X
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
