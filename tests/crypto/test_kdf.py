"""HKDF: RFC 5869 construction checked with stdlib hmac; one distinct label per purpose."""

import hashlib
import hmac

import pytest

from secagg_dp.crypto import kdf
from secagg_dp.errors import ParameterError


def _rfc5869(ikm: bytes, info: bytes, length: int, salt: bytes = b"") -> bytes:
    # Independent oracle: RFC 5869 Sec. 2.2-2.3 written out with hashlib/hmac.
    prk = hmac.new(salt or b"\x00" * 32, ikm, hashlib.sha256).digest()
    out, block, i = b"", b"", 1
    while len(out) < length:
        block = hmac.new(prk, block + info + bytes([i]), hashlib.sha256).digest()
        out += block
        i += 1
    return out[:length]


def test_derive_matches_rfc5869():
    ikm = bytes(range(32))
    info = kdf.context(kdf.LABEL_PAIRWISE_MASK, b"r" * 16, 3, 9)
    assert kdf.derive(ikm, info=info) == _rfc5869(ikm, info, 32)
    assert kdf.derive(ikm, info=info, length=80) == _rfc5869(ikm, info, 80)


def test_rfc5869_test_case_1_through_oracle():
    # RFC 5869 Appendix A.1 (IKM 0x0b*22, salt 0x00..0x0c, info 0xf0..0xf9, L = 42) validates the oracle.
    okm = _rfc5869(b"\x0b" * 22, bytes(range(0xF0, 0xFA)), 42, salt=bytes(range(13)))
    assert okm.hex() == "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865"


def test_labels_are_distinct_and_prefix_free():
    labels = kdf.LABELS
    assert len(set(labels)) == len(labels)
    for a in labels:
        for b in labels:
            assert a == b or not (a + b"\x00").startswith(b + b"\x00")


def test_purposes_give_independent_keys():
    ikm = b"\x01" * 32
    keys = {
        kdf.derive(ikm, info=kdf.context(lab, b"r" * 16, 1, 2)) for lab in (kdf.LABEL_CHANNEL, kdf.LABEL_PAIRWISE_MASK)
    }
    keys.add(kdf.derive(ikm, info=kdf.context(kdf.LABEL_CHANNEL, b"s" * 16, 1, 2)))  # other round
    keys.add(kdf.derive(ikm, info=kdf.context(kdf.LABEL_CHANNEL, b"r" * 16, 1, 3)))  # other pair
    assert len(keys) == 4


def test_unregistered_label_refused():
    with pytest.raises(ParameterError):
        kdf.derive(b"\x01" * 32, info=b"some-other-purpose")
    with pytest.raises(ParameterError):
        kdf.context(b"unregistered", b"r" * 16)
