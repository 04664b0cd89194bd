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


_P = 2**255 - 19
_A = 486662  # Curve25519: v^2 = u^3 + A u^2 + u over GF(p)


def _openssl_low_order(public: bytes) -> bool:
    """The independent check: OpenSSL's X25519 (through cryptography) refuses an all-zero shared secret."""
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

    try:
        X25519PrivateKey.from_private_bytes(bytes(range(1, 33))).exchange(X25519PublicKey.from_public_bytes(public))
    except ValueError:
        return True
    return False


def test_low_order_table_agrees_with_openssl():
    """Every listed key, with and without the top bit (which X25519 ignores), every u below 64 and within 64
    of p (canonical or not), and 2000 random keys: the table says low order exactly where OpenSSL's
    exchange yields the all-zero secret."""
    import random

    rnd = random.Random(7)
    cases = [bytes.fromhex(h) for h in LOW_ORDER]
    cases += [c[:31] + bytes([c[31] | 0x80]) for c in cases]
    cases += [u.to_bytes(32, "little") for u in list(range(64)) + list(range(_P - 64, 2**255))]
    cases += [rnd.getrandbits(256).to_bytes(32, "little") for _ in range(2000)]
    got = [keys.is_low_order(c) for c in cases]
    assert got == [_openssl_low_order(c) for c in cases]
    assert sum(got) == 2 * len(LOW_ORDER) + 5  # the list twice, and 0, 1 (low range), p - 1, p, p + 1 (high range)


def _poly_mod(a: list[int], f: list[int]) -> list[int]:
    """a mod f over GF(p); coefficient lists, lowest degree first, f monic."""
    a = [x % _P for x in a]
    while len(a) >= len(f):
        c = a[-1]
        shift = len(a) - len(f)
        for i, fc in enumerate(f):
            a[shift + i] = (a[shift + i] - c * fc) % _P
        a.pop()
    while a and a[-1] == 0:
        a.pop()
    return a


def _poly_mul(a: list[int], b: list[int]) -> list[int]:
    out = [0] * (len(a) + len(b) - 1) if a and b else []
    for i, x in enumerate(a):
        for j, y in enumerate(b):
            out[i + j] = (out[i + j] + x * y) % _P
    return out


def _poly_gcd_degree(f: list[int]) -> int:
    """The number of distinct roots of f in GF(p): deg gcd(f, x^p - x)."""
    inv = pow(f[-1], -1, _P)
    f = [c * inv % _P for c in f]
    r, base, e = [1], [0, 1], _P  # x^p mod f by square and multiply
    while e:
        if e & 1:
            r = _poly_mod(_poly_mul(r, base), f)
        base = _poly_mod(_poly_mul(base, base), f)
        e >>= 1
    g = r + [0] * (2 - len(r))
    g[1] = (g[1] - 1) % _P  # x^p - x mod f
    a, b = f, _poly_mod(g, f)
    while b:
        inv = pow(b[-1], -1, _P)
        a, b = b, _poly_mod(a, [c * inv % _P for c in b])
    return len(a) - 1


def test_small_order_set_is_complete():
    """The small-order u-coordinates, from the x-only doubling x(2P) = (x^2 - 1)^2 / (4x(x^2 + Ax + 1)) (curve
    and twist together): order 2 is x(x^2 + Ax + 1) = 0, order 4 is x(2P) = 0, i.e. x = +-1, and order 8 is
    x(2P) = c for c = +-1, i.e. (x^2 - 1)^2 - 4c x(x^2 + Ax + 1) = 0. Counting roots in GF(p) shows these are
    exactly the five u the table holds (and that 8 | the order of no other point, on curve or twist)."""
    assert _poly_gcd_degree([1, _A, 1]) == 0  # x^2 + Ax + 1: no root, so 0 is the only order-2 u
    found = {0, 1, _P - 1}
    for c in (1, -1):
        # (x^2 - 1)^2 - 4c(x^3 + A x^2 + x) = x^4 - 4c x^3 - (2 + 4cA) x^2 - 4c x + 1
        quartic = [1, -4 * c, -(2 + 4 * c * _A), -4 * c, 1]
        roots = [u for u in keys._SMALL_ORDER_U if sum(q * pow(u, i, _P) for i, q in enumerate(quartic)) % _P == 0]
        assert _poly_gcd_degree(quartic) == len(roots)
        found |= set(roots)
    assert found == keys._SMALL_ORDER_U
