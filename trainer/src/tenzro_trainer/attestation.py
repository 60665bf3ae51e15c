"""Trainer-side attestation for the Verified and Confidential tiers.

Protocol rules stay in Go: evidence comes from ``tenzro attest quote`` (the binding, the GPU nonce and the
composite CPU + GPU envelope are computed there), and the Confidential dataset key from ``tenzro attest
dataset-key`` (broker nonce, X25519, unwrap), read from a pipe and kept in memory. What lives here: running
those commands, collecting GPU evidence through NVML on a CC-mode NVIDIA GPU, and decrypting the dataset in
memory (``decrypt_dataset``: AES-256-GCM in ``enclave.EncryptDataset``'s layout, checked against Go by a shared
vector in ``enclave/testdata/dataset_vector.json``).
"""

from __future__ import annotations

import base64
import ctypes
import ctypes.util
import hashlib
import json
import os
import subprocess
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from .config import ConfigError

GCM_NONCE = 12
GCM_TAG = 16
MAX_DATASET = 1 << 30
# How long a submission's claim waits for the answering node to reach the submission's round (Attester.claim).
NONCE_WAIT_S = 30.0

ENCLAVES = {
    "auto", "configfs-tsm", "configfs-tsm-snp", "sev-guest", "nsm",
    "simulated-snp", "simulated-tdx", "simulated-nitro",
}  # fmt: skip
GPUS = {"none", "simulated", "nvml", "auto"}


class DecryptError(Exception):
    pass


class AttestationError(Exception):
    pass


# ---------------------------------------------------------------------------------------- AES-256-GCM
def _libcrypto() -> ctypes.CDLL:
    name = ctypes.util.find_library("crypto")
    if not name:
        raise DecryptError("OpenSSL's libcrypto was not found (needed for AES-256-GCM)")
    lib = ctypes.CDLL(name)
    lib.EVP_CIPHER_CTX_new.restype = ctypes.c_void_p
    lib.EVP_CIPHER_CTX_free.argtypes = [ctypes.c_void_p]
    lib.EVP_aes_256_gcm.restype = ctypes.c_void_p
    lib.EVP_DecryptInit_ex.argtypes = [
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_char_p,
        ctypes.c_char_p,
    ]
    lib.EVP_DecryptUpdate.argtypes = [
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.POINTER(ctypes.c_int),
        ctypes.c_char_p,
        ctypes.c_int,
    ]
    lib.EVP_DecryptFinal_ex.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    lib.EVP_CIPHER_CTX_ctrl.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    return lib


_EVP_CTRL_GCM_SET_IVLEN = 0x9
_EVP_CTRL_GCM_SET_TAG = 0x11
_EVP_CTRL_GCM_GET_TAG = 0x10


def decrypt_dataset(key: bytes, task_id: str, blob: bytes) -> bytes:
    """Decrypts a Confidential dataset in memory: ``blob`` = nonce (12) ‖ ciphertext ‖ tag (16), AES-256-GCM
    under ``key`` with additional data ``b"dataset/" + task_id`` (``enclave.EncryptDataset``). Raises
    DecryptError on a wrong key, task or any changed byte."""
    if len(key) != 32:
        raise DecryptError(f"dataset key is {len(key)} bytes, want 32")
    if len(blob) < GCM_NONCE + GCM_TAG or len(blob) > MAX_DATASET:
        raise DecryptError(f"encrypted dataset is {len(blob)} bytes, want {GCM_NONCE + GCM_TAG}..{MAX_DATASET}")
    nonce, ct, tag = blob[:GCM_NONCE], blob[GCM_NONCE:-GCM_TAG], blob[-GCM_TAG:]
    aad = b"dataset/" + task_id.encode()
    lib = _libcrypto()
    ctx = lib.EVP_CIPHER_CTX_new()
    if not ctx:
        raise DecryptError("EVP_CIPHER_CTX_new failed")
    try:
        n = ctypes.c_int(0)
        ok = lib.EVP_DecryptInit_ex(ctx, lib.EVP_aes_256_gcm(), None, None, None)
        ok = ok and lib.EVP_CIPHER_CTX_ctrl(ctx, _EVP_CTRL_GCM_SET_IVLEN, GCM_NONCE, None)
        ok = ok and lib.EVP_DecryptInit_ex(ctx, None, None, key, nonce)
        ok = ok and lib.EVP_DecryptUpdate(ctx, None, ctypes.byref(n), aad, len(aad))
        out = ctypes.create_string_buffer(len(ct) + 16)
        ok = ok and lib.EVP_DecryptUpdate(ctx, out, ctypes.byref(n), ct, len(ct))
        total = n.value
        tagbuf = ctypes.create_string_buffer(tag, GCM_TAG)
        ok = ok and lib.EVP_CIPHER_CTX_ctrl(ctx, _EVP_CTRL_GCM_SET_TAG, GCM_TAG, tagbuf)
        if not ok:
            raise DecryptError("AES-256-GCM setup failed")
        fin = lib.EVP_DecryptFinal_ex(ctx, ctypes.byref(out, total), ctypes.byref(n))
        if fin != 1:
            raise DecryptError("dataset does not decrypt: wrong key or task, or the ciphertext was changed")
        return out.raw[: total + n.value]
    finally:
        lib.EVP_CIPHER_CTX_free(ctx)


def encrypt_dataset(key: bytes, task_id: str, plaintext: bytes) -> bytes:
    """The sponsor's side of ``decrypt_dataset`` (``enclave.EncryptDataset``): a random 12-byte nonce ‖
    AES-256-GCM ciphertext ‖ tag, additional data ``b"dataset/" + task_id``."""
    if len(key) != 32:
        raise DecryptError(f"dataset key is {len(key)} bytes, want 32")
    nonce = os.urandom(GCM_NONCE)
    aad = b"dataset/" + task_id.encode()
    lib = _libcrypto()
    for fn in ("EVP_EncryptInit_ex", "EVP_EncryptUpdate", "EVP_EncryptFinal_ex"):
        getattr(lib, fn).argtypes = {
            "EVP_EncryptInit_ex": lib.EVP_DecryptInit_ex.argtypes,
            "EVP_EncryptUpdate": lib.EVP_DecryptUpdate.argtypes,
            "EVP_EncryptFinal_ex": lib.EVP_DecryptFinal_ex.argtypes,
        }[fn]
    ctx = lib.EVP_CIPHER_CTX_new()
    if not ctx:
        raise DecryptError("EVP_CIPHER_CTX_new failed")
    try:
        n = ctypes.c_int(0)
        out = ctypes.create_string_buffer(len(plaintext) + 16)
        tag = ctypes.create_string_buffer(GCM_TAG)
        ok = lib.EVP_EncryptInit_ex(ctx, lib.EVP_aes_256_gcm(), None, None, None)
        ok = ok and lib.EVP_CIPHER_CTX_ctrl(ctx, _EVP_CTRL_GCM_SET_IVLEN, GCM_NONCE, None)
        ok = ok and lib.EVP_EncryptInit_ex(ctx, None, None, key, nonce)
        ok = ok and lib.EVP_EncryptUpdate(ctx, None, ctypes.byref(n), aad, len(aad))
        ok = ok and lib.EVP_EncryptUpdate(ctx, out, ctypes.byref(n), plaintext, len(plaintext))
        total = n.value
        ok = ok and lib.EVP_EncryptFinal_ex(ctx, ctypes.byref(out, total), ctypes.byref(n))
        ok = ok and lib.EVP_CIPHER_CTX_ctrl(ctx, _EVP_CTRL_GCM_GET_TAG, GCM_TAG, tag)
        if not ok:
            raise DecryptError("AES-256-GCM encryption failed")
        return nonce + out.raw[: total + n.value] + tag.raw
    finally:
        lib.EVP_CIPHER_CTX_free(ctx)


# ---------------------------------------------------------------------------------------- NVML
def nvml_gpu_evidence(nonce: bytes, index: int = 0) -> tuple[bytes, bytes] | None:
    """The GPU's attestation report for ``nonce`` and its certificate chain (PEM) through NVML
    (``nvidia-ml-py``), or None when there is no NVML or no GPU in CC mode."""
    try:
        import pynvml  # type: ignore[import-not-found]
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        st = pynvml.nvmlSystemGetConfComputeState()
        if int(getattr(st, "ccFeature", 0)) == 0:
            return None
        h = pynvml.nvmlDeviceGetHandleByIndex(index)
        rep = pynvml.nvmlDeviceGetConfComputeGpuAttestationReport(h, nonce)
        report = bytes(rep.attestationReport[: rep.attestationReportSize])
        cert = pynvml.nvmlDeviceGetConfComputeGpuCertificate(h)
        chain = bytes(cert.attestationCertChain[: cert.attestationCertChainSize])
        return report, chain
    finally:
        pynvml.nvmlShutdown()


# ---------------------------------------------------------------------------------------- evidence
@dataclass
class AttestConfig:
    enclave: str = "auto"
    gpu: str = "auto"  # auto: NVML when a CC GPU is there, none otherwise
    program: str = "tenzro-trainer"  # hashed (SHA-256) into the binding as the program hash
    tenzro: str = "tenzro"  # the tenzro CLI


def parse_config(d: Any) -> AttestConfig | None:
    if d is None:
        return None
    if not isinstance(d, dict):
        raise ConfigError("config: attestation must be a mapping")
    bad = sorted(set(d) - set(AttestConfig.__dataclass_fields__))
    if bad:
        raise ConfigError(f"config: unknown attestation keys {bad}")
    c = AttestConfig(**{k: str(v) for k, v in d.items()})
    if c.enclave not in ENCLAVES:
        raise ConfigError(f"config: attestation.enclave {c.enclave!r}: want one of {sorted(ENCLAVES)}")
    if c.gpu not in GPUS:
        raise ConfigError(f"config: attestation.gpu {c.gpu!r}: want one of {sorted(GPUS)}")
    return c


class Attester:
    """Gets evidence for enrolments and submissions, and the Confidential dataset key."""

    def __init__(self, cfg: AttestConfig, rpc_url: str) -> None:
        self.cfg, self.rpc = cfg, rpc_url
        self.program_hash = hashlib.sha256(cfg.program.encode()).digest()

    def _nonce(self, client: Any, task_id: str, did: str, round_: int | None, wait_s: float) -> dict:
        """tenzro_attest_getNonce, asked again while the node's round is behind ``round_`` (see claim)."""
        deadline, pause = time.monotonic() + wait_s, 0.05
        while True:
            n = client.call("tenzro_attest_getNonce", {"task_id": task_id, "did": did})
            if round_ is None or int(n.get("round", round_)) >= round_ or time.monotonic() >= deadline:
                return n
            time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
            pause = min(2 * pause, 1.0)

    def _tenzro(self, *args: str) -> str:
        cmd = [self.cfg.tenzro, *args, "--rpc", self.rpc]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise AttestationError(f"{' '.join(cmd[:3])}: {e}") from e
        if p.returncode != 0:
            raise AttestationError(f"{' '.join(cmd[:3])} failed ({p.returncode}): {p.stderr.strip()[-500:]}")
        return p.stdout

    def claim(
        self,
        client: Any,
        task_id: str,
        did: str,
        payload_hash: bytes | None = None,
        round_: int | None = None,
        wait_s: float = NONCE_WAIT_S,
    ) -> dict:
        """A fresh attestation claim for ``did``'s next enrolment (``payload_hash`` None) or for its submission of
        the payload whose content hash is ``payload_hash`` on ``task_id``: the report data binds that hash, so
        the evidence covers exactly the gradient it goes with (docs/PROTOCOL.md §11).

        ``round_`` is the round the submission is for. The nonce is the round's, as the answering node's state
        sees it; a node whose state is behind (a light node's replica a block or two late, while the trainer
        learnt of the round from another node) hands out the previous round's nonce, and the syncer refuses
        evidence bound to it. So the nonce is asked for again, with growing pauses, until the node's round is
        ``round_`` or ``wait_s`` has passed (then the claim goes out as is and the syncer's refusal says why)."""
        n = self._nonce(client, task_id, did, round_, wait_s)
        nonce = base64.b64decode(n["nonce"])
        model = str(n["model_hash"]).removeprefix("0x")
        bind = f"program={self.program_hash.hex()},shard={int(n['shard'])},model={model},did={did}"
        if payload_hash is not None:
            bind += f",payload={payload_hash.hex()}"
        args = [
            "attest",
            "quote",
            "--enclave",
            self.cfg.enclave,
            "--nonce",
            nonce.hex(),
            "--bind",
            bind,
            "--format",
            "claim",
        ]
        gpu = self.cfg.gpu
        if gpu in ("nvml", "auto"):
            gn = self._tenzro("attest", "quote", "--gpu-nonce-only", "--nonce", nonce.hex(), "--bind", bind).strip()
            ev = nvml_gpu_evidence(bytes.fromhex(gn))
            if ev is None and gpu == "nvml":
                raise AttestationError("attestation.gpu is nvml but no NVIDIA GPU in CC mode answers through NVML")
            if ev is not None:
                with tempfile.TemporaryDirectory(prefix="tenzro-gpu-") as d:
                    rp, cp = os.path.join(d, "report.bin"), os.path.join(d, "chain.pem")
                    with open(rp, "wb") as f:
                        f.write(ev[0])
                    with open(cp, "wb") as f:
                        f.write(ev[1])
                    return json.loads(self._tenzro(*args, "--gpu", "files", "--gpu-report", rp, "--gpu-cert", cp))
        elif gpu == "simulated":
            args += ["--gpu", "simulated"]
        return json.loads(self._tenzro(*args))

    def dataset_key(self, task_id: str) -> bytes:
        """The Confidential run's dataset key, released by the node's key broker to this enclave's evidence.
        It comes through a pipe and stays in memory."""
        args = ["attest", "dataset-key", "--task", task_id, "--enclave", self.cfg.enclave]
        if self.cfg.gpu == "simulated":
            args += ["--gpu", "simulated"]
        key = bytes.fromhex(self._tenzro(*args).strip())
        if len(key) != 32:
            raise AttestationError(f"dataset key is {len(key)} bytes, want 32")
        return key


def load_encrypted_corpus(ref: str, key: bytes, task_id: str, sources: Any = None) -> list:
    """A Confidential run's corpus: the ciphertext (``file://``, or ``ipfs://``/``https://`` fetched through
    ``sources``, a ``data.Sources``) is read, decrypted and parsed in memory."""
    from urllib.parse import unquote, urlparse

    from . import data

    u = urlparse(ref)
    if u.scheme in ("ipfs", "https"):
        blob = data.fetch_bytes(ref, sources)
        try:
            plain = decrypt_dataset(key, task_id, blob)
        except DecryptError as e:
            raise data.DatasetError(f"{ref}: {e}") from e
        return data.csv_series(plain.decode("utf-8"), ref + " (decrypted in memory)")
    if u.scheme != "file":
        raise data.DatasetError(f"dataset_ref {ref!r}: an encrypted dataset must be file://, ipfs:// or https://")
    path = unquote(u.path)
    if os.path.getsize(path) > MAX_DATASET:
        raise data.DatasetError(f"{path}: larger than {MAX_DATASET} bytes")
    with open(path, "rb") as f:
        blob = f.read()
    try:
        plain = decrypt_dataset(key, task_id, blob)
    except DecryptError as e:
        raise data.DatasetError(f"{path}: {e}") from e
    return data.csv_series(plain.decode("utf-8"), path + " (decrypted in memory)")
