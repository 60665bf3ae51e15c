"""did:tenzro identities and the shared key-file format (docs/PROTOCOL.md §2)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import base58
from nacl.exceptions import BadSignatureError
from nacl.signing import SigningKey, VerifyKey

PREFIX = "did:tenzro:"
KINDS = ("human", "machine")
MULTICODEC_ED25519 = b"\xed\x01"
MAX_DID_LEN = 128
MAX_KEY_FILE = 4096
ENV_KEY = "TENZRO_KEY"  # the Go CLI's default-key variable (cmd/tenzro/defaultkey.go)


def did_from_public_key(kind: str, pub: bytes) -> str:
    if kind not in KINDS:
        raise ValueError(f"did kind {kind!r}: want 'human' or 'machine'")
    if len(pub) != 32:
        raise ValueError(f"did: public key is {len(pub)} bytes, want 32")
    return PREFIX + kind + ":z" + base58.b58encode(MULTICODEC_ED25519 + pub).decode("ascii")


def parse_did(s: str) -> tuple[str, bytes]:
    """Returns (kind, public key); strict: the string must re-encode to itself."""
    if len(s) > MAX_DID_LEN:
        raise ValueError(f"did: {len(s)} bytes, limit {MAX_DID_LEN}")
    if not s.startswith(PREFIX):
        raise ValueError(f"did {s!r}: must start with {PREFIX!r}")
    kind, sep, mb = s[len(PREFIX) :].partition(":")
    if not sep or kind not in KINDS:
        raise ValueError(f"did {s!r}: want did:tenzro:<human|machine>:<multibase key>")
    if not mb.startswith("z"):
        raise ValueError(f"did {s!r}: key must be multibase base58btc (prefix 'z')")
    try:
        raw = base58.b58decode(mb[1:])
    except ValueError as e:
        raise ValueError(f"did {s!r}: key: {e}") from e
    if len(raw) != 34 or raw[:2] != MULTICODEC_ED25519:
        raise ValueError(f"did {s!r}: key is not a multicodec ed25519-pub key")
    if did_from_public_key(kind, raw[2:]) != s:
        raise ValueError(f"did {s!r}: non-canonical encoding")
    return kind, raw[2:]


def verify(did: str, msg: bytes, sig: bytes) -> bool:
    _, pub = parse_did(did)
    try:
        VerifyKey(pub).verify(msg, sig)
    except BadSignatureError:
        return False
    return True


@dataclass(frozen=True)
class Key:
    """A private identity: the DID and its Ed25519 signing key."""

    kind: str
    seed: bytes

    @property
    def _sk(self) -> SigningKey:
        return SigningKey(self.seed)

    @property
    def public_key(self) -> bytes:
        return bytes(self._sk.verify_key)

    @property
    def did(self) -> str:
        return did_from_public_key(self.kind, self.public_key)

    def sign(self, msg: bytes) -> bytes:
        return self._sk.sign(msg).signature

    @classmethod
    def generate(cls, kind: str = "machine") -> Key:
        return cls(kind, bytes(SigningKey.generate()))

    @classmethod
    def from_seed(cls, kind: str, seed: bytes) -> Key:
        if len(seed) != 32:
            raise ValueError(f"seed is {len(seed)} bytes, want 32")
        return cls(kind, bytes(seed))

    def to_json(self) -> bytes:
        body = {"did": self.did, "public_key": self.public_key.hex(), "private_key": self.seed.hex()}
        return (json.dumps(body, indent=2) + "\n").encode()

    @classmethod
    def from_json(cls, b: bytes) -> Key:
        if len(b) > MAX_KEY_FILE:
            raise ValueError(f"key file: {len(b)} bytes, limit {MAX_KEY_FILE}")
        f = json.loads(b)
        if not isinstance(f, dict) or set(f) - {"did", "public_key", "private_key"}:
            raise ValueError("key file: want an object with did, public_key, private_key")
        kind, _ = parse_did(f.get("did", ""))
        k = cls.from_seed(kind, bytes.fromhex(f.get("private_key", "")))
        if k.did != f["did"]:
            raise ValueError("key file: private_key does not belong to did")
        if f.get("public_key") and f["public_key"] != k.public_key.hex():
            raise ValueError("key file: public_key does not match private_key")
        return k

    def save(self, path: str | os.PathLike) -> None:
        """Writes the key file with mode 0600, refusing to overwrite."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(self.to_json())

    @classmethod
    def load(cls, path: str | os.PathLike) -> Key:
        p = Path(path)
        if p.stat().st_size > MAX_KEY_FILE:
            raise ValueError(f"key file {p}: larger than {MAX_KEY_FILE} bytes")
        return cls.from_json(p.read_bytes())


def default_key_path(given: str = "") -> Path | None:
    """The key file a helper signs with, as the Go CLI picks it for ``tenzro dataset get``: ``given`` (a
    ``--key`` value), else ``$TENZRO_KEY``, else ``~/.tenzro/key.json`` when it exists (what ``tenzro key
    generate`` writes); None when there is none (the helper then sends unsigned requests, which only a
    ``--dev`` node takes). A path that is named but missing is returned as is, so loading it fails loudly."""
    if given:
        return Path(given).expanduser()
    env = os.environ.get(ENV_KEY, "")
    if env:
        return Path(env).expanduser()
    p = Path.home() / ".tenzro" / "key.json"
    return p if p.exists() else None
