"""MongoDB URIs given to the command: parsed and checked once, shown without their password.

Every subcommand that takes ``--uri`` (``demo``, ``bench``, ``compare``, ``counters``) reads it
with :func:`parse` before any work starts, and reaches the server with
:meth:`MongoURI.client_options` (a short server selection timeout), so the same URI gets the
same answer everywhere:

* a URI that is not a MongoDB URI (another scheme, no scheme, an empty host, a port outside
  0-65535, an unknown option, a bad database name, credentials or TLS files pymongo's client
  refuses) is a usage error, exit status 2;
* a ``mongodb+srv://`` host that DNS cannot resolve, or a server that does not answer within
  the timeout, is a runtime error, exit status 1;
* a URI is only ever shown as :attr:`MongoURI.shown`: the password replaced by ``***``, long
  URIs cut short.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import quote_plus

from .cli import EXIT_USAGE, CommandError, shorten

#: pymongo waits 30 s for a server by default; the command says sooner that none answers.
#: A URI with its own ``serverSelectionTimeoutMS`` keeps it.
SERVER_SELECTION_TIMEOUT_MS: Final = 3_000

SCHEMES: Final = ("mongodb://", "mongodb+srv://")
EXPECTED: Final = (
    "expected 'mongodb://[USER:PASSWORD@]HOST[:PORT][,HOST...][/DATABASE][?OPTIONS]' "
    "or 'mongodb+srv://[USER:PASSWORD@]HOST[/DATABASE][?OPTIONS]'"
)
MASK: Final = "***"
#: Said of a URI whose user information pymongo cannot read (not percent-encoded).
BAD_USERINFO: Final = (
    "the user name or password is not valid (percent-encode ':', '/', '?', '#', '[', ']', "
    "'@' and '%' in them)"
)
#: The ``authMechanism`` values whose user is always authenticated on ``$external`` (pymongo
#: refuses another ``authSource`` for them; PLAIN, LDAP, does take the URI's database).
EXTERNAL_MECHANISMS: Final = frozenset({"GSSAPI", "MONGODB-AWS", "MONGODB-OIDC", "MONGODB-X509"})
#: How many characters of a URI a message shows.
SHOWN_CHARACTERS: Final = 120

_SCHEME: Final = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
#: Option values that are secrets: any option whose name holds "password", and the AWS session
#: token inside authMechanismProperties.
_SECRET_OPTION: Final = re.compile(r"(?i)([?&;][^=&;?]*password[^=&;?]*=)([^&;]*)")
_SECRET_PROPERTY: Final = re.compile(r"(?i)(AWS_SESSION_TOKEN:)([^,&;]*)")
#: The characters MongoDB refuses in a database name (those of every platform but Windows').
_BAD_DATABASE_CHARACTERS: Final = '/\\. "$\x00'
_MAX_DATABASE_BYTES: Final = 63


def _split_userinfo(text: str) -> tuple[str, str, str] | None:
    """``(prefix, userinfo, rest)`` of a URI-like ``text`` with an ``@``, else None.

    The user information is taken up to the **last** ``@``: a password whose ``/``, ``?`` or
    ``@`` was not percent-encoded is still all inside it (pymongo would reject such a URI, and
    its message must not show the password either).
    """
    match = _SCHEME.match(text)
    prefix = match.group(0) if match else ""
    userinfo, at, rest = text[len(prefix) :].rpartition("@")
    if not at:
        return None
    return prefix, userinfo, rest


def redact(text: str) -> str:
    """``text`` (a URI, or what was given as one) with its password and secret options masked.

    ``mongodb://admin:s3cret@db.example/shop`` -> ``mongodb://admin:***@db.example/shop``.
    """
    parts = _split_userinfo(text)
    if parts is not None:
        prefix, userinfo, rest = parts
        user, colon, _ = userinfo.partition(":")
        text = f"{prefix}{user}{colon}{MASK if colon else ''}@{rest}"
    text = _SECRET_OPTION.sub(rf"\g<1>{MASK}", text)
    return _SECRET_PROPERTY.sub(rf"\g<1>{MASK}", text)


def secrets(text: str) -> list[str]:
    """The secrets written in ``text``: the password (as written and decoded), secret options.

    :func:`scrub` removes them from any message; values under 3 characters are left out (they
    would mangle the message and hide nothing).
    """
    from urllib.parse import unquote_plus

    found: list[str] = []
    parts = _split_userinfo(text)
    if parts is not None:
        _, colon, password = parts[1].partition(":")
        if colon:
            found += [password, unquote_plus(password)]
    for pattern in (_SECRET_OPTION, _SECRET_PROPERTY):
        found += [match.group(2) for match in pattern.finditer(text)]
    return sorted({value for value in found if len(value) >= 3}, key=len, reverse=True)


def given_uris(argv: list[str]) -> list[str]:
    """The URIs in the arguments ``argv``: the values of ``--uri`` (also written ``--uri=URI``,
    or shortened as argparse takes it, ``--ur URI``), and any argument or option's value with
    a scheme (``mongodb://...``, ``--db=mongodb://...``: given in the wrong place).
    :func:`secrets` reads their passwords; other arguments are not URIs, even shaped as one
    (``a:b@c``).
    """
    found = []
    arguments = iter(argv)
    for argument in arguments:
        option, equals, value = argument.partition("=")
        if len(option) >= len("--u") and "--uri".startswith(option):
            found += [value] if equals else list(itertools.islice(arguments, 1))
        elif _SCHEME.match(argument):
            found.append(argument)
        elif equals and option.startswith("-") and _SCHEME.match(value):
            found.append(value)
    return found


def scrub(message: str, hidden: list[str]) -> str:
    """``message`` with every value of ``hidden`` (see :func:`secrets`) replaced by ``***``."""
    for value in hidden:
        message = message.replace(value, MASK)
    return message


def server_message(error: BaseException) -> str:
    """The first line of a pymongo error, without the topology and timeout details."""
    text = " ".join(str(error).split())  # on one line, whatever the host name held
    text = text.replace(" Refer to docstring.", "")  # pymongo's, about its own MongoClient
    for tail in (", Timeout: ", " (configured timeouts: ", ", full error: "):
        text = text.split(tail)[0]
    return shorten(text, 300, quoted=False) if text else type(error).__name__


def connect_message(error: BaseException) -> str:
    """:func:`server_message` of an error raised while connecting: of a pymongo error, or of
    what MongoEngine's ``ConnectionFailure`` wraps (pymongo's refusal of the client's options,
    which MongoEngine words as ``Cannot connect to database ALIAS :`` and its own alias)."""
    from mongoengine.connection import ConnectionFailure

    if isinstance(error, ConnectionFailure):
        cause = error.__cause__ or error.__context__
        if cause is not None:
            return server_message(cause)
    return server_message(error)


def _database_problem(name: str) -> str | None:
    """Why MongoDB would refuse ``name`` as a database name, or None."""
    if not name:
        return "it is empty"
    if len(name.encode("utf-8", "surrogatepass")) > _MAX_DATABASE_BYTES:
        return f"it is longer than {_MAX_DATABASE_BYTES} bytes"
    bad = next((c for c in name if c in _BAD_DATABASE_CHARACTERS), None)
    if bad is not None:
        return f'it contains {bad!r} (MongoDB refuses / \\ . " $, spaces and NUL)'
    return None


def check_database_name(name: str, *, source: str = "--db") -> str:
    """Return ``name`` if MongoDB accepts it as a database name, else raise a usage error.

    Raises:
        CommandError: (status 2) ``name`` is empty, longer than 63 bytes, or holds one of
            ``/\\. "$`` or NUL.
    """
    problem = _database_problem(name)
    if problem is not None:
        raise CommandError(
            f"{source} {shorten(name)} is not a valid database name: {problem}", status=EXIT_USAGE
        )
    return name


def check_collection_name(name: str, *, source: str = "--collection") -> str:
    """Return ``name`` if MongoDB accepts it as a collection name, else raise a usage error.

    Raises:
        CommandError: (status 2) ``name`` is empty, holds ``$`` or NUL, has an empty part
            between dots, or starts with ``system.``.
    """
    problem = None
    if not name:
        problem = "it is empty"
    elif "$" in name or "\x00" in name:
        problem = "it contains '$' or NUL"
    elif name.startswith(".") or name.endswith(".") or ".." in name:
        problem = "a part between dots is empty"
    elif name.startswith("system."):
        problem = "names starting with 'system.' are MongoDB's own"
    if problem is not None:
        raise CommandError(
            f"{source} {shorten(name)} is not a valid collection name: {problem}",
            status=EXIT_USAGE,
        )
    return name


@dataclass(frozen=True)
class MongoURI:
    """A MongoDB URI that :func:`parse` accepted.

    Attributes:
        text: the URI as given, password included: pass it to a client, never print it.
        shown: the URI to print: password masked, cut short if long.
        database: the database the URI names, or None.
        options: the URI's options, as pymongo parsed them.
        username: the user name, or None.
    """

    text: str = field(repr=False)
    shown: str
    database: str | None
    options: dict[str, Any] = field(repr=False)
    username: str | None = None

    def client_options(self) -> dict[str, Any]:
        """Keyword arguments for the client: a short server selection timeout, unless set."""
        if any(key.lower() == "serverselectiontimeoutms" for key in self.options):
            return {}
        return {"serverSelectionTimeoutMS": SERVER_SELECTION_TIMEOUT_MS}

    def without_database(self) -> str:
        """The URI with its database left out, for a command that makes its own database.

        MongoEngine uses the URI's database over the one it is given; the URI's database is
        also where a user authenticates unless ``authSource`` says otherwise, so that is kept
        (as ``authSource``), except for the mechanisms that authenticate on ``$external``
        whatever the URI's database (:data:`EXTERNAL_MECHANISMS`), which pymongo refuses
        with any other ``authSource``.
        """
        if self.database is None:
            return self.text
        scheme, _, rest = self.text.partition("://")
        before_query, question, query = rest.partition("?")
        hosts = before_query.partition("/")[0]
        options = {key.lower(): value for key, value in self.options.items()}
        if (
            self.username is not None
            and "authsource" not in options
            and options.get("authmechanism") not in EXTERNAL_MECHANISMS
        ):
            auth = f"authSource={quote_plus(self.database)}"
            query = f"{query}&{auth}" if query else auth
            question = "?"
        return f"{scheme}://{hosts}/{question}{query}"


def open_client(target: MongoURI) -> Any:
    """A pymongo client of the server ``target`` names, once that server answered a ping.

    Raises:
        CommandError: (status 1) no server answered within the timeout, or the DNS of a
            ``mongodb+srv://`` host failed.
    """
    import pymongo
    import pymongo.errors

    client: Any = None
    try:
        client = pymongo.MongoClient(target.text, **target.client_options())
        client.admin.command("ping")
    except pymongo.errors.PyMongoError as error:
        if client is not None:
            client.close()
        raise CommandError(
            f"cannot use the server at {target.shown}: {server_message(error)}"
        ) from error
    return client


def _is_dns_failure(error: BaseException) -> bool:
    """Whether pymongo raised ``error`` because a DNS lookup (of a ``mongodb+srv`` host) failed."""
    cause = error.__cause__ or error.__context__  # pymongo before 4.3 does not chain it
    return cause is not None and type(cause).__module__.split(".")[0] == "dns"


def parse(text: str, *, source: str = "--uri") -> MongoURI:
    """Check ``text`` as a MongoDB URI with pymongo's parser and return it parsed.

    Args:
        text: the URI.
        source: where it came from, for messages (``--uri``, ``$MONGOENGINE_IDS_URI``).

    Raises:
        CommandError: status 2 when ``text`` is not a valid MongoDB URI (scheme, host, port,
            options, database name); status 1 when the host of a ``mongodb+srv://`` URI
            cannot be resolved. The message shows the URI as :func:`redact` does.
    """
    from pymongo.uri_parser import parse_uri

    shown = shorten(redact(text), SHOWN_CHARACTERS)
    if not text.startswith(SCHEMES):
        raise CommandError(f"{source} {shown} is not a MongoDB URI: {EXPECTED}", status=EXIT_USAGE)
    problem = _netloc_problem(text)
    if problem is not None:
        raise CommandError(
            f"{source} {shown} is not a valid MongoDB URI: {problem}", status=EXIT_USAGE
        )
    try:
        parsed = parse_uri(text)
    except Exception as error:
        if text.startswith("mongodb+srv://") and _is_dns_failure(error):
            raise CommandError(
                f"{source} {shown}: cannot resolve the host: {server_message(error)}"
            ) from error
        raise CommandError(
            f"{source} {shown} is not a valid MongoDB URI: {_safe_reason(text, error)}",
            status=EXIT_USAGE,
        ) from error
    database = parsed.get("database")
    problem = _hosts_problem(parsed.get("nodelist") or [])
    if problem is not None:
        raise CommandError(
            f"{source} {shown} is not a valid MongoDB URI: {problem}", status=EXIT_USAGE
        )
    problem = None if database is None else _database_problem(database)
    if problem is not None:
        raise CommandError(
            f"{source} {shown} names a database MongoDB refuses: {problem}", status=EXIT_USAGE
        )
    problem = _client_problem(text)
    if problem is not None:
        raise CommandError(
            f"{source} {shown} is not a valid MongoDB URI: {problem}", status=EXIT_USAGE
        )
    return MongoURI(
        text=text,
        shown=shown,
        database=database,
        options=dict(parsed.get("options") or {}),
        username=parsed.get("username"),
    )


def _netloc_problem(text: str) -> str | None:
    """What is wrong with the hosts of ``text``, said the same way whatever pymongo's version
    (4.0 reads ``mongodb:///shop`` as the host ``shop``, and words the rest differently).

    The hosts are read as pymongo reads them: up to the first ``/`` or ``?``, after the last
    ``@`` there. A password holding an unencoded ``/`` or ``?`` then reads as a host and port
    (``app:pa`` of ``mongodb://app:pa/ss@db/shop``): when the hosts after the URI's last ``@``
    have no problem, the user information is what is wrong, and is said to be."""
    scheme, _, rest = text.partition("://")
    problem = _hosts_text_problem(scheme, _hosts_text(rest))
    userinfo, at, after = rest.rpartition("@")
    # Only hosts pymongo would refuse are read again: an "@" in an option's value, which
    # pymongo takes, leaves a valid URI valid.
    if (
        problem is not None
        and at
        and ("/" in userinfo or "?" in userinfo)
        and _hosts_text_problem(scheme, _hosts_text(after)) is None
    ):
        return BAD_USERINFO
    return problem


def _hosts_text(rest: str) -> str:
    """The hosts of a URI without its scheme, as pymongo cuts them out."""
    return rest.split("/", 1)[0].split("?", 1)[0].rpartition("@")[2]


def _hosts_text_problem(scheme: str, hosts: str) -> str | None:
    """What is wrong with ``hosts``, the hosts of a URI of ``scheme``, or None."""
    if not hosts or not all(hosts.split(",")):
        return "Empty host (or extra comma in host list)"
    for host in hosts.split(","):
        port = host.rpartition("]")[2].partition(":")[2] if host.startswith("[") else ""
        if not host.startswith("["):
            port = host.partition(":")[2]
        if port and not port.isdigit():
            return "Port contains non-digit characters"  # not quoted: it may be a password
        if port and not 0 < int(port) <= 65535:
            return "Port must be an integer between 1 and 65535"
    if scheme == "mongodb+srv" and "," in hosts:
        return "a mongodb+srv:// URI must have one, and only one, hostname"
    if scheme == "mongodb+srv" and ":" in hosts.rpartition("]")[2]:
        return "a mongodb+srv:// URI must not include a port number"
    return None


def _client_problem(text: str) -> str | None:
    """Why pymongo's client refuses ``text``, which its parser took, or None.

    The parser checks neither the credentials (an ``authSource`` other than ``$external`` for
    MONGODB-X509, a user without a password) nor what the TLS files hold, which the client
    loads when it is made: each command failed there, as an internal error (probe BE). Made
    with ``connect=False``: nothing is sent.
    """
    from pymongo.errors import PyMongoError
    from pymongo.mongo_client import MongoClient

    try:
        MongoClient(text, connect=False).close()
    except (PyMongoError, ValueError, TypeError, OSError) as error:
        if _is_dns_failure(error):
            return None  # resolved once already: the command reports it when it connects
        return scrub(shorten(server_message(error), 200, quoted=False), secrets(text))
    return None


def _hosts_problem(nodes: list[tuple[str, int | None]]) -> str | None:
    """What is wrong with the hosts pymongo accepted (``mongodb://:27017`` has an empty one)."""
    for host, _ in nodes:
        if not host:
            return "a host is empty"
        if any(character.isspace() or not character.isprintable() for character in host):
            return f"the host {shorten(host)} has spaces or control characters in it"
    return None


def _safe_reason(text: str, error: BaseException) -> str:
    """Why pymongo refuses ``text``, in words that cannot hold its password.

    pymongo's message may quote part of the URI (``Bad database name "ss@host"`` for a password
    with a ``/`` in it), so the reason is the one pymongo gives for the redacted URI; if that
    one parses, the password itself was the problem.
    """
    from pymongo.uri_parser import parse_uri

    masked = redact(text)
    if masked == text:
        return shorten(server_message(error), 200, quoted=False)
    try:
        parse_uri(masked)
    except Exception as masked_error:  # the same reason, without the secret
        if not _is_dns_failure(masked_error):
            return shorten(server_message(masked_error), 200, quoted=False)
    return BAD_USERINFO


__all__ = [
    "EXPECTED",
    "EXTERNAL_MECHANISMS",
    "SERVER_SELECTION_TIMEOUT_MS",
    "MongoURI",
    "check_collection_name",
    "check_database_name",
    "connect_message",
    "given_uris",
    "open_client",
    "parse",
    "redact",
    "scrub",
    "secrets",
    "server_message",
]
