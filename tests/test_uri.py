"""``mongoengine_ids.tools.uri``: the command's URIs, parsed once, shown without their password."""

from __future__ import annotations

from typing import Any

import pytest

from mongoengine_ids.tools import uri
from mongoengine_ids.tools.cli import CommandError


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("mongodb://localhost/shop", "mongodb://localhost/shop"),
        ("mongodb://admin:s3cret@db:27017/shop", "mongodb://admin:***@db:27017/shop"),
        ("mongodb+srv://admin:s3cret@cluster.example/", "mongodb+srv://admin:***@cluster.example/"),
        ("mongodb://admin@db/shop", "mongodb://admin@db/shop"),  # a user, no password
        ("mongodb://admin:@db/shop", "mongodb://admin:***@db/shop"),
        # Not percent-encoded: '/', '?' and '@' in the password stay masked.
        ("mongodb://admin:pa/ss@db/shop", "mongodb://admin:***@db/shop"),
        ("mongodb://admin:p?a@ss@db/shop", "mongodb://admin:***@db/shop"),
        ("http://admin:s3cret@db/shop", "http://admin:***@db/shop"),  # any scheme
        ("admin:s3cret@db/shop", "admin:***@db/shop"),  # no scheme
        (
            "mongodb://db/?tls=true&tlsCertificateKeyFilePassword=s3cret&appName=x",
            "mongodb://db/?tls=true&tlsCertificateKeyFilePassword=***&appName=x",
        ),
        (
            "mongodb://db/?authMechanismProperties=AWS_SESSION_TOKEN:t0ken,X:y",
            "mongodb://db/?authMechanismProperties=AWS_SESSION_TOKEN:***,X:y",
        ),
    ],
)
def test_redact(text: str, shown: str) -> None:
    assert uri.redact(text) == shown


def test_secrets_and_scrub() -> None:
    hidden = uri.secrets("mongodb://admin:s3cr%2Ft@db/?tlsCertificateKeyFilePassword=k3y")
    assert set(hidden) == {"s3cr%2Ft", "s3cr/t", "k3y"}
    assert uri.scrub("s3cr/t, s3cr%2Ft and k3y", hidden) == "***, *** and ***"
    assert uri.secrets("mongodb://a:b@db/") == []  # too short to hide anything
    # Only an option named *password* is a secret, not the next option after the user's.
    assert uri.secrets("mongodb://a:PASSWORD@db/?serverSelectionTimeoutMS=100") == ["PASSWORD"]


@pytest.mark.parametrize(
    ("argv", "uris"),
    [
        (["counters", "--uri", "mongodb://a:pw1@db/x", "list"], ["mongodb://a:pw1@db/x"]),
        (["counters", "list", "--uri=a:pw1@db"], ["a:pw1@db"]),  # no scheme: still a URI
        (["counters", "--ur", "a:pw1@db", "list"], ["a:pw1@db"]),  # shortened, as argparse takes
        (["demo", "mongodb://a:pw1@db"], ["mongodb://a:pw1@db"]),  # a scheme: in the wrong place
        (["counters", "--db=mongodb://a:pw1@db/x", "list"], ["mongodb://a:pw1@db/x"]),  # review S
        # Not URIs, whatever their shape (probe: a name "app:tenant@eu" was shown masked):
        (["counters", "show", "app:tenant@eu", "--scope", "x:yyy@z"], []),
        (["counters", "set", "--uri"], []),  # no value
    ],
)
def test_given_uris(argv: list[str], uris: list[str]) -> None:
    assert uri.given_uris(argv) == uris


def test_parse_keeps_the_uri_and_shows_it_masked() -> None:
    parsed = uri.parse("mongodb://admin:s3cret@db:27017/shop?appName=x")

    assert parsed.text == "mongodb://admin:s3cret@db:27017/shop?appName=x"
    assert parsed.shown == "'mongodb://admin:***@db:27017/shop?appName=x'"
    assert parsed.database == "shop"
    assert parsed.username == "admin"
    assert "s3cret" not in repr(parsed)
    assert parsed.client_options() == {"serverSelectionTimeoutMS": uri.SERVER_SELECTION_TIMEOUT_MS}


def test_a_uri_with_its_own_timeout_keeps_it() -> None:
    parsed = uri.parse("mongodb://db/?serverselectiontimeoutms=100")
    assert parsed.client_options() == {}


@pytest.mark.parametrize(
    ("text", "without"),
    [
        ("mongodb://db/shop", "mongodb://db/"),
        ("mongodb://db/shop?w=1", "mongodb://db/?w=1"),
        ("mongodb://db", "mongodb://db"),
        # The URI's database is where its user authenticates: kept as authSource.
        ("mongodb://u:p@db/shop", "mongodb://u:p@db/?authSource=shop"),
        ("mongodb://u:p@db/shop?w=1", "mongodb://u:p@db/?w=1&authSource=shop"),
        ("mongodb://u:p@db/shop?authSource=admin", "mongodb://u:p@db/?authSource=admin"),
        # Probe BE: these mechanisms authenticate on $external, and pymongo refuses another
        # authSource for them: none is added (the command failed as an internal error).
        (
            "mongodb://CN=client@db/shop?authMechanism=MONGODB-X509",
            "mongodb://CN=client@db/?authMechanism=MONGODB-X509",
        ),
        (
            "mongodb://CN=client@db/shop?authmechanism=MONGODB-X509",  # the key in any case
            "mongodb://CN=client@db/?authmechanism=MONGODB-X509",
        ),
        (
            "mongodb://KEY:SECRET@db/shop?authMechanism=MONGODB-AWS",
            "mongodb://KEY:SECRET@db/?authMechanism=MONGODB-AWS",
        ),
        (
            "mongodb://u%40REALM@db/shop?authMechanism=GSSAPI",
            "mongodb://u%40REALM@db/?authMechanism=GSSAPI",
        ),
        # PLAIN (LDAP) takes the URI's database as its source: kept.
        (
            "mongodb://u:p@db/shop?authMechanism=PLAIN",
            "mongodb://u:p@db/?authMechanism=PLAIN&authSource=shop",
        ),
    ],
)
def test_without_database(text: str, without: str) -> None:
    assert uri.parse(text).without_database() == without
    assert uri.parse(without).database is None


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        ("localhost:27017/shop", ["'localhost:27017/shop' is not a MongoDB URI", "expected"]),
        ("http://x/shop", ["'http://x/shop' is not a MongoDB URI"]),
        ("", ["'' is not a MongoDB URI"]),
        ("mongodb://", ["is not a valid MongoDB URI: Empty host"]),
        ("mongodb:///shop", ["is not a valid MongoDB URI: Empty host"]),
        ("mongodb://db:99999/x", ["is not a valid MongoDB URI: Port must be an integer"]),
        ("mongodb://db:0/x", ["Port must be an integer"]),
        ("mongodb://db:port/x", ["Port contains non-digit characters"]),
        ("mongodb://db/x?bogus=1", ["Unknown option", "bogus"]),
        ("mongodb://db/x?w=-5", ["is not a valid MongoDB URI: "]),
        ("mongodb://[::1/x", ["is not a valid MongoDB URI: "]),
        ("mongodb://db/a$b", ["Bad database name"]),
        (
            "mongodb://db/" + "d" * 70,
            ["names a database MongoDB refuses: it is longer than 63 bytes"],
        ),
        ("mongodb+srv://db:27017/x", ["must not include a port number"]),
        ("mongodb+srv://a,b/x", ["one, and only one, hostname"]),
        ("mongodb://%zz@db/x", ["must be escaped"]),
        ("mongodb://:27017/x", ["is not a valid MongoDB URI: a host is empty"]),
        ("mongodb://db,:1/x", ["a host is empty"]),
        ("mongodb://d b/x", ["the host 'd b' has spaces or control characters in it"]),
        ("mongodb://db\t/x", ["the host 'db\\t' has spaces"]),
        # Probe BE: an unencoded '/' or '?' in the password was reported as a bad port.
        ("mongodb://app:pa/ss@db.example/shop", [uri.BAD_USERINFO]),
        ("mongodb://app:pa?ss@db.example/shop", [uri.BAD_USERINFO]),
        ("mongodb+srv://app:pa/ss@db.example/shop", [uri.BAD_USERINFO]),
        # Probe BE: what pymongo's client refuses, not its parser, failed each command later,
        # as an internal error: the credentials (the TLS files: below).
        (
            "mongodb://CN=c@db/shop?authMechanism=MONGODB-X509&authSource=admin",
            ["is not a valid MongoDB URI: authentication source must be $external"],
        ),
        ("mongodb://u@db/shop?authMechanism=SCRAM-SHA-256", ["A password is required"]),
    ],
)
def test_parse_rejects_with_a_usage_error(text: str, fragments: list[str]) -> None:
    with pytest.raises(CommandError) as caught:
        uri.parse(text)

    assert caught.value.status == 2
    message = str(caught.value)
    assert message.startswith("--uri ")
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message


@pytest.mark.parametrize(
    "text",
    [
        "mongodb://admin:pa/ss@db/shop",  # pymongo would say: Bad database name "ss@db/shop"
        "mongodb://admin:s3cret@db:99999/shop",
        "mongodb://admin:s3cr%zzet@db/shop",  # a bad escape in the password itself
        "http://admin:s3cret@db/shop",
        "mongodb://admin:s3cret@db/shop?bogus=1",
        "mongodb://admin:s3cret@db/" + "x" * 100,
    ],
)
def test_a_rejected_uri_never_shows_its_password(text: str) -> None:
    with pytest.raises(CommandError) as caught:
        uri.parse(text)

    message = str(caught.value)
    for secret in ("pa/ss", "ss@", "s3cr"):
        assert secret not in message
    assert "admin:***@" in message


@pytest.mark.parametrize("option", ["tlsCertificateKeyFile", "tlsCAFile"])
def test_parse_rejects_a_tls_file_the_client_cannot_load(tmp_path: Any, option: str) -> None:
    # Probe BE: pymongo's parser checks that the file can be read, its client what it holds.
    path = tmp_path / "not-a-certificate.pem"
    path.write_text("not a certificate\n")

    with pytest.raises(CommandError) as caught:
        uri.parse(f"mongodb://db/shop?tls=true&{option}={path}")

    assert caught.value.status == 2
    assert str(caught.value).startswith(f"--uri 'mongodb://db/shop?tls=true&{option}=")
    assert " is not a valid MongoDB URI: " in str(caught.value)


@pytest.mark.parametrize(
    "text",
    [
        # pymongo takes an '@' in an option's value: not user information, the URI is valid.
        "mongodb://db/shop?appName=x@y:abc",
        "mongodb://db:27017/shop?appName=a/b@c",
        "mongodb://u:p@db/?authMechanism=MONGODB-AWS&authMechanismProperties=AWS_SESSION_TOKEN:a@b",
    ],
)
def test_an_at_sign_in_the_options_is_no_user_information(text: str) -> None:
    assert uri.parse(text).text == text


def test_connect_message_is_the_error_mongoengine_wraps() -> None:
    from mongoengine.connection import ConnectionFailure

    try:
        try:
            raise ValueError("authentication source must be $external or None for MONGODB-X509")
        except ValueError as error:
            raise ConnectionFailure(f"Cannot connect to database bench :\n{error}")  # noqa: B904
    except ConnectionFailure as failure:
        wrapped = failure
    assert uri.connect_message(wrapped) == (
        "authentication source must be $external or None for MONGODB-X509"
    )
    # Not wrapping anything: its own message.
    assert uri.connect_message(ConnectionFailure("A different connection")) == (
        "A different connection"
    )


def test_a_long_uri_is_cut_short() -> None:
    with pytest.raises(CommandError) as caught:
        uri.parse("mongodb://db:99999/" + "x" * 5000)

    message = str(caught.value)
    assert len(message) < 300
    assert "... (5,019 characters)" in message


def test_an_unresolvable_srv_host_is_a_runtime_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import dns.resolver

    def nxdomain(*args: Any, **kwargs: Any) -> Any:
        raise dns.resolver.NXDOMAIN(qnames=[dns.name.from_text("_mongodb._tcp.nowhere.invalid")])

    monkeypatch.setattr(dns.resolver, "resolve", nxdomain)

    with pytest.raises(CommandError) as caught:
        uri.parse("mongodb+srv://admin:s3cret@db.nowhere.invalid/shop")

    assert caught.value.status == 1
    message = str(caught.value)
    assert message.startswith(
        "--uri 'mongodb+srv://admin:***@db.nowhere.invalid/shop': cannot resolve"
    )
    assert "s3cret" not in message


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("", "it is empty"),
        ("a/b", "it contains '/'"),
        ("a.b", "it contains '.'"),
        ("a b", "it contains ' '"),
        ("a$b", "it contains '$'"),
        ('a"b', "it contains '\"'"),
        ("a\\b", "it contains '\\\\'"),
        ("a\x00b", "it contains '\\x00'"),
        ("é" * 32, "longer than 63 bytes"),
    ],
)
def test_check_database_name(name: str, fragment: str) -> None:
    with pytest.raises(CommandError, match="is not a valid database name") as caught:
        uri.check_database_name(name)
    assert caught.value.status == 2
    assert fragment in str(caught.value)


def test_check_database_name_accepts_what_mongodb_does() -> None:
    for name in ("shop", "Shop-2024_a", "é" * 31, "x" * 63):
        assert uri.check_database_name(name) == name


def test_server_message_is_one_line() -> None:
    import pymongo.errors

    error = pymongo.errors.ServerSelectionTimeoutError(
        "127.0.0.1:1: [Errno 111] Connection refused (configured timeouts: socketTimeoutMS: "
        "20000.0ms), Timeout: 3.0s, Topology Description: <...>"
    )
    assert uri.server_message(error) == "127.0.0.1:1: [Errno 111] Connection refused"
    assert uri.server_message(ValueError("")) == "ValueError"


@pytest.mark.parametrize("name", ["", "a$b", "a\x00b", ".a", "a.", "a..b"])
def test_check_collection_name_refuses(name: str) -> None:
    with pytest.raises(CommandError, match="is not a valid collection name") as caught:
        uri.check_collection_name(name)
    assert caught.value.status == 2


def test_check_collection_name_accepts() -> None:
    for name in ("mongoengine.counters", "counters", "a-b_c"):
        assert uri.check_collection_name(name) == name
