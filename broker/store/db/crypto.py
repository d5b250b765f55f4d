"""Kubeconfigs are stored encrypted (Fernet: AES-128-CBC + HMAC-SHA256) and decrypted only to connect."""

from __future__ import annotations

from cryptography.fernet import Fernet, InvalidToken


class KubeconfigCipher:
    def __init__(self, key: bytes) -> None:
        self._fernet = Fernet(key)

    def encrypt(self, kubeconfig: str) -> bytes:
        return self._fernet.encrypt(kubeconfig.encode())

    def decrypt(self, blob: bytes) -> str:
        try:
            return self._fernet.decrypt(bytes(blob)).decode()
        except InvalidToken:
            raise ValueError("stored kubeconfig cannot be decrypted: ARCHIPELAGO_SECRET_KEY changed since "
                             "the cluster was registered; restore the old key or register the cluster again"
                             ) from None
