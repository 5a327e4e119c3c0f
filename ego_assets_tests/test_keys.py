import pytest

from ego_assets.errors import CaptureKeyError
from ego_assets.keys import MAX_KEY_LENGTH, is_valid_capture_key, validate_capture_key


@pytest.mark.parametrize(
    "key",
    ["a", "cap-2026.11.02_T101500", "A9", "x" * MAX_KEY_LENGTH, "aria-mps-sample", "0-start"],
)
def test_valid_keys_are_returned_unchanged(key):
    assert validate_capture_key(key) == key
    assert is_valid_capture_key(key)


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        ("", "must match"),
        ("x" * (MAX_KEY_LENGTH + 1), "at most 128"),
        ("a/b", "must match"),
        ("../etc", "must match"),
        ("a..b", "'..'"),
        ("a...b", "'..'"),
        ("-leading-dash", "must match"),
        (".hidden", "must match"),
        ("has space", "must match"),
        ("tab\tkey", "must match"),
        ("comma,key", "must match"),
        ("pipe|key", "must match"),
        ("ünïcode", "must match"),
        ("line\nbreak", "must match"),
    ],
)
def test_invalid_keys_are_rejected_with_the_reason(key, reason):
    with pytest.raises(CaptureKeyError, match=reason):
        validate_capture_key(key)
    assert not is_valid_capture_key(key)


def test_non_string_key_is_rejected():
    with pytest.raises(CaptureKeyError, match="string"):
        validate_capture_key(42)  # type: ignore[arg-type]
