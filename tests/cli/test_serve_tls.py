"""`headway serve`'s TLS files and inference token: flags and HEADWAY_ variables, refused at
once with the file named when unusable, and handed to whichever HTTP server runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from tests.cli.settings import settings_from
from tests.integration.certificates import Certificates, issue

from headway.api.grpc.server import GrpcServer
from headway.api.tls import server_tls, standard_ciphers
from headway.cli import main
from headway.cli.serve import ServeSettings, build_app, uvicorn_config


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return issue(tmp_path_factory.mktemp("certificates"))


def test_tls_files_and_the_inference_token_are_flags_and_environment_variables(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, certificates: Certificates
) -> None:
    env = {
        "HEADWAY_TLS_CERT": str(certificates.cert),
        "HEADWAY_TLS_KEY": str(certificates.key),
        "HEADWAY_INFERENCE_TOKEN": "t",
    }
    settings = settings_from(monkeypatch, ["--repository", str(tmp_path)], env)
    assert (settings.tls_cert, settings.tls_key) == (certificates.cert, certificates.key)
    assert settings.inference_token == "t"
    flags = ["--tls-cert", "c.pem", "--tls-key", "k.pem", "--inference-token", "u"]
    settings = settings_from(monkeypatch, ["--repository", str(tmp_path), *flags], {})
    assert (settings.tls_cert, settings.tls_key) == (Path("c.pem"), Path("k.pem"))
    assert settings.inference_token == "u"


@pytest.mark.parametrize(
    ("files", "message"),
    [
        (["--tls-cert", "{cert}"], "--tls-cert needs --tls-key too"),
        (["--tls-key", "{key}"], "--tls-key needs --tls-cert too"),
        (["--tls-cert", "{cert}", "--tls-key", "{tmp}/none.pem"], "none.pem: cannot read it"),
        (["--tls-cert", "{cert}", "--tls-key", "{cert}"], "cannot be used together"),
    ],
)
def test_unusable_tls_files_are_refused_before_anything_starts(
    tmp_path: Path, certificates: Certificates, files: list[str], message: str
) -> None:
    names = {"cert": certificates.cert, "key": certificates.key, "tmp": tmp_path}
    args = [part.format(**names) for part in files]
    for http in ("native", "uvicorn", "granian"):
        result = CliRunner().invoke(
            main.cli,
            ["serve", "--repository", str(tmp_path), "--state", str(tmp_path / "s.db"),
             "--http", http, *args],
        )  # fmt: skip
        assert result.exit_code == 1, result.output
        assert message in result.output
        assert not (tmp_path / "s.db").exists()  # refused before the store was opened


def test_each_http_server_gets_the_tls_files(tmp_path: Path, certificates: Certificates) -> None:
    settings = ServeSettings(
        repository=tmp_path,
        state=tmp_path / "s.db",
        tls_cert=certificates.cert,
        tls_key=certificates.key,
    )
    app = build_app(settings)
    grpc = next(c for c in app.companions if isinstance(c, GrpcServer))
    assert grpc.tls is not None
    tls = server_tls(certificates.cert, certificates.key)
    config = uvicorn_config(app, settings, tls)
    assert (config.ssl_certfile, config.ssl_keyfile) == (certificates.cert, certificates.key)
    assert config.ssl_ciphers == standard_ciphers()
    plain = build_app(ServeSettings(repository=tmp_path, state=tmp_path / "p.db"))
    assert next(c for c in plain.companions if isinstance(c, GrpcServer)).tls is None
