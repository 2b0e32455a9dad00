"""verify_webhook against vectors made by @botdir/signing (the dispatcher's signing code)."""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any, Dict

import pytest

from botdir import WebhookVerificationError, verify_webhook
from botdir.webhook import legacy_signature, standard_signature

from ..conftest import PACKAGE_ROOT, REPO_ROOT

VECTORS_FILE = PACKAGE_ROOT / "tests" / "vectors.json"
VECTORS: Dict[str, Any] = json.loads(VECTORS_FILE.read_text("utf-8"))


def test_the_committed_vectors_are_what_botdir_signing_makes_now() -> None:
    node = shutil.which("node")
    assert node is not None, "node is needed to regenerate the vectors"
    made = subprocess.run(
        [node, "--import", "tsx", "e2e/src/python/vectors.ts"],
        cwd=REPO_ROOT,
        capture_output=True,
        check=True,
        timeout=120,
    )
    assert json.loads(made.stdout) == VECTORS


@pytest.mark.parametrize("vector", VECTORS["vectors"], ids=lambda v: f"{v['secret'][:12]}…{v['headers']['webhook-id'][-3:]}")
def test_signatures_agree_byte_for_byte(vector: Dict[str, Any]) -> None:
    body = vector["body"].encode("utf-8")
    headers = vector["headers"]
    timestamp = int(headers["webhook-timestamp"])
    assert standard_signature(vector["secret"], headers["webhook-id"], timestamp, body) == headers["webhook-signature"]
    assert legacy_signature(vector["secret"], body) == vector["legacySignature"]

    verified = verify_webhook(body, headers, vector["secret"], now=timestamp)
    assert (verified.delivery_id, verified.scheme) == (headers["webhook-id"], "standard")
    assert verified.event == json.loads(vector["body"])

    legacy = {
        "X-Webhook-Signature-256": vector["legacySignature"],
        "Authorization": vector["secret"],
        "X-Webhook-Delivery": "d-1",
    }
    delivery_id, event, scheme = verify_webhook(body, legacy, vector["secret"])
    assert (delivery_id, scheme, event) == ("d-1", "legacy", json.loads(vector["body"]))


@pytest.mark.parametrize("vector", VECTORS["vectors"][:3])
def test_a_changed_byte_or_another_secret_is_refused(vector: Dict[str, Any]) -> None:
    body = vector["body"].encode("utf-8")
    headers = vector["headers"]
    now = int(headers["webhook-timestamp"])
    # Re-serialised JSON is other bytes: refused.
    reserialised = json.dumps(json.loads(body)).encode("utf-8")
    assert reserialised != body
    for changed, secret in ((reserialised, vector["secret"]), (body, "whsec_" + "ab" * 32)):
        with pytest.raises(WebhookVerificationError) as caught:
            verify_webhook(changed, headers, secret, now=now)
        assert caught.value.reason == "invalid_signature"


def test_during_a_rotation_either_secret_verifies_the_two_signatures() -> None:
    rotation = VECTORS["rotation"]
    headers = rotation["headers"]
    assert len(headers["webhook-signature"].split(" ")) == 2
    now = int(headers["webhook-timestamp"])
    for secret in rotation["secrets"]:
        assert verify_webhook(rotation["body"], headers, secret, now=now).delivery_id == headers["webhook-id"]
    assert verify_webhook(rotation["body"], headers, ["whsec_other", rotation["secrets"][1]], now=now).scheme == "standard"
