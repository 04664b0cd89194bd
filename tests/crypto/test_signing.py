"""Ed25519 signing with purpose labels, and low-order X25519 key detection."""

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from secagg_dp.crypto import keys, signing
from secagg_dp.crypto.randomness import SeededRandom
from secagg_dp.errors import AuthenticationError, ParameterError

KEY = signing.generate_signing_key(source=SeededRandom(b"\x11" * 32))
BODY = b"round-id-and-keys"


def test_public_key_from_seed_matches_rfc8032_test_1():
    # RFC 8032, Sec. 7.1, TEST 1: SECRET KEY 9d61...7f60 -> PUBLIC KEY d75a...511a; its signature of the
    # empty message verifies under our loaded key (checks load_public_key against the RFC, not our signer).
    k = signing.signing_key_from_seed(bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60"))
    assert k.public.hex() == "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"
    sig = bytes.fromhex(
        "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"
    )
    assert isinstance(signing.load_public_key(k.public), Ed25519PublicKey)
    signing.load_public_key(k.public).verify(sig, b"")


def test_sign_verify_round_trip_and_every_failure_is_opaque():
    sig = KEY.sign(signing.LABEL_ADVERTISE_KEYS, BODY)
    signing.verify(KEY.public, signing.LABEL_ADVERTISE_KEYS, BODY, sig)
    other = signing.generate_signing_key(source=SeededRandom(b"\x12" * 32))
    bad = bytearray(sig)
    bad[5] ^= 1
    cases = [
        (KEY.public, signing.LABEL_SURVIVOR_SET, BODY, sig),  # same bytes, other purpose
        (KEY.public, signing.LABEL_ADVERTISE_KEYS, BODY + b"!", sig),  # other body
        (other.public, signing.LABEL_ADVERTISE_KEYS, BODY, sig),  # other key
        (KEY.public, signing.LABEL_ADVERTISE_KEYS, BODY, bytes(bad)),  # tampered signature
        (KEY.public, signing.LABEL_ADVERTISE_KEYS, BODY, sig[:-1]),  # truncated signature
    ]
    for args in cases:
        with pytest.raises(AuthenticationError, match="^signature failed verification$"):
            signing.verify(*args)


def test_unregistered_label_refused_and_private_key_hidden():
    with pytest.raises(ParameterError, match="label"):
        KEY.sign(b"secagg-dp/v2/sign/other", BODY)
    assert "_key" not in repr(KEY) and "Ed25519PrivateKey" not in repr(KEY) and "public=" in repr(KEY)


# The canonical small-order u-coordinates of Curve25519 (0, 1, the two order-8 points, and p - 1, p, p + 1
# as non-reduced encodings), as listed by Bernstein's "Curve25519: new Diffie-Hellman speed records"
# validation note and libsodium's x25519 blocklist; every exchange with them yields the all-zero secret.
LOW_ORDER = [
    "0000000000000000000000000000000000000000000000000000000000000000",
    "0100000000000000000000000000000000000000000000000000000000000000",
    "e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800",
    "5f9c95bca3508c24b1d0b1559c83ef5b04445cc4581c8e86d8224eddd09f1157",
    "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
    "edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
    "eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
]


@pytest.mark.parametrize("hexkey", LOW_ORDER)
def test_low_order_keys_detected(hexkey):
    assert keys.is_low_order(bytes.fromhex(hexkey))


def test_ordinary_keys_are_not_low_order_and_bad_lengths_refused():
    assert not any(
        keys.is_low_order(keys.generate_keypair(source=SeededRandom(bytes([i]) * 32)).public) for i in range(20)
    )
    with pytest.raises(ParameterError):
        keys.is_low_order(bytes(31))
