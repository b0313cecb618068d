"""Passwords of store URLs live in memory and in the environment, never in a file.

A `--storage postgresql://user:password@host/db` or `--tracking-uri
http://user:password@host:5000` is split at the command line's edge
(`without_password`): the rest of the platform (worker payloads, run folders, Optuna and MLflow
records, logs) only ever sees the URL without its password, and the password goes into
this process's environment, which the study's worker processes and the training
subprocesses inherit (readable only by the user: /proc/<pid>/environ is 0400). The
code that opens a connection puts it back (`with_password`).

- An http(s) MLflow tracking server: its user and password become MLflow's own
  `MLFLOW_TRACKING_USERNAME` / `MLFLOW_TRACKING_PASSWORD` (HTTP basic auth, what a
  server started with `mlflow server --app-name basic-auth` asks for), which every
  MLflow client of every process reads by itself; set them directly instead of
  writing them into the URL to keep them out of the shell history.
- A database URL (Optuna storage, or MLflow on a database): the password is kept in
  `CEM_ABLATE_PASSWORD_<digest of the URL without it>`, so two databases with
  different passwords do not mix.
"""

from __future__ import annotations

import hashlib
import os
from typing import overload
from urllib.parse import unquote, urlsplit, urlunsplit

PASSWORD_ENV_PREFIX = "CEM_ABLATE_PASSWORD_"
MLFLOW_USERNAME_ENV, MLFLOW_PASSWORD_ENV = "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"


def is_http(url: str) -> bool:
    return url.startswith(("http://", "https://"))


def _password_env(url_without_password: str) -> str:
    return PASSWORD_ENV_PREFIX + hashlib.sha256(url_without_password.encode()).hexdigest()[:16].upper()


@overload
def without_password(url: str) -> str: ...
@overload
def without_password(url: None) -> None: ...
def without_password(url: str | None) -> str | None:
    """`url` without its password, the password moved into this process's environment
    (call once, where the URL enters: the command line)."""
    if not url or "@" not in url:
        return url
    if is_http(url):
        parts = urlsplit(url)
        if parts.username is None and parts.password is None:
            return url
        if parts.username is not None:
            os.environ[MLFLOW_USERNAME_ENV] = unquote(parts.username)
        if parts.password is not None:
            os.environ[MLFLOW_PASSWORD_ENV] = unquote(parts.password)
        host = parts.netloc.rsplit("@", 1)[1]
        return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError:
        return url  # not a database URL: nothing of ours to hide; its opener names the problem
    if parsed.password is None:
        return url
    bare = parsed._replace(password=None).render_as_string(hide_password=False)  # URL.set keeps a None field
    os.environ[_password_env(bare)] = str(parsed.password)
    return bare


def with_password(url: str) -> str:
    """The URL to connect with: a database URL gets back the password `without_password`
    put into the environment (http servers read MLflow's own variables themselves)."""
    if is_http(url) or "@" not in url:
        return url
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    password = os.environ.get(_password_env(url))
    if password is None:
        return url
    try:
        parsed = make_url(url)
    except ArgumentError:
        return url
    if parsed.password is not None:
        return url
    return parsed.set(password=password).render_as_string(hide_password=False)


def basic_auth_header() -> dict[str, str]:
    """The HTTP basic-auth header MLflow's client sends (from its environment variables)."""
    import base64

    user, password = os.environ.get(MLFLOW_USERNAME_ENV), os.environ.get(MLFLOW_PASSWORD_ENV)
    if user is None and password is None:
        return {}
    token = base64.b64encode(f"{user or ''}:{password or ''}".encode()).decode()
    return {"Authorization": f"Basic {token}"}
