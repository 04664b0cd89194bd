"""X25519 (RFC 7748 vector) and the AES-GCM share channel."""

import pytest

from secagg_dp.crypto import aead, keys
from secagg_dp.crypto.randomness import SeededRandom
from secagg_dp.errors import AuthenticationError

# RFC 7748 Sec. 6.1 test vector.
ALICE_SK = "77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a"
ALICE_PK = "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a"
BOB_SK = "5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb"
BOB_PK = "de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f"
SHARED = "4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742"


def test_x25519_rfc7748_vector():
    a, b = keys.keypair_from_private(bytes.fromhex(ALICE_SK)), keys.keypair_from_private(bytes.fromhex(BOB_SK))
    assert a.public.hex() == ALICE_PK and b.public.hex() == BOB_PK
    assert keys.exchange(a, b.public).hex() == SHARED == keys.exchange(b, a.public).hex()


def test_private_key_not_in_repr():
    kp = keys.keypair_from_private(bytes.fromhex(ALICE_SK))
    assert ALICE_SK not in repr(kp) and "private" not in repr(kp)


def test_low_order_point_refused():
    kp = keys.generate_keypair()
    with pytest.raises(AuthenticationError):
        keys.exchange(kp, bytes(32))  # the all-zero point gives an all-zero shared secret


def test_seeded_keys_reproducible():
    assert keys.generate_keypair(source=SeededRandom(b"\x01" * 32)) == keys.generate_keypair(
        source=SeededRandom(b"\x01" * 32)
    )
    assert "key hidden" in repr(SeededRandom(b"\x01" * 32))


KEY = b"\x05" * 32
RID = b"r" * 16


def test_seal_open_roundtrip_and_binding():
    ad = aead.associated_data(RID, 1, 2)
    box = aead.seal(KEY, b"share", ad)
    assert aead.open_sealed(KEY, box, ad) == b"share"
    for bad_ad in (
        aead.associated_data(b"s" * 16, 1, 2),
        aead.associated_data(RID, 3, 2),
        aead.associated_data(RID, 1, 3),
    ):
        with pytest.raises(AuthenticationError):  # other round, sender or recipient
            aead.open_sealed(KEY, box, bad_ad)
    with pytest.raises(AuthenticationError):
        aead.open_sealed(b"\x06" * 32, box, ad)


@pytest.mark.parametrize("pos", [0, 11, 12, 16, -17, -1])
def test_any_tampered_byte_refused(pos):
    ad = aead.associated_data(RID, 1, 2)
    box = bytearray(aead.seal(KEY, b"0123456789", ad))
    box[pos] ^= 0x80
    with pytest.raises(AuthenticationError, match="^ciphertext failed authentication$"):
        aead.open_sealed(KEY, bytes(box), ad)


def test_short_box_refused():
    with pytest.raises(AuthenticationError):
        aead.open_sealed(KEY, b"\x00" * 27, b"")
