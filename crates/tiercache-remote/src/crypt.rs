//! Key naming and value sealing.
//!
//! From the master [`RemoteKey`] two independent subkeys are derived with
//! `blake3::derive_key` (distinct context strings): one names memcached keys, one encrypts
//! values.
//! - A memcached key is `tc` + 32 hex digits of a keyed BLAKE3 hash of (namespace, dev, ino,
//!   birth, block, version): it reveals no file name or inode number, and differs between
//!   namespaces and versions.
//! - A value is `nonce(24) ‖ XChaCha20-Poly1305(seq_le(8) ‖ block) ‖ tag(16)` with a random
//!   nonce per store; the associated data binds the namespace and the memcached key, so a
//!   value copied under another key or from another namespace fails authentication. `seq` is
//!   the store's sequence number, also kept in the client-side index: a read whose `seq`
//!   differs from the index's is a miss (a late, older store that overwrote a newer one).

use crate::keyfile::RemoteKey;
use chacha20poly1305::aead::{AeadInPlace, KeyInit};
use chacha20poly1305::{Tag, XChaCha20Poly1305, XNonce};
use rand::RngCore;
use std::fmt;
use tiercache_tier::TierKey;

const NAME_CONTEXT: &str = "tiercache-remote 2026-11 memcached key naming";
const SEAL_CONTEXT: &str = "tiercache-remote 2026-11 value encryption";
const AAD_LABEL: &[u8] = b"tiercache-remote v1";

/// Bytes a sealed value adds to the block: nonce, sequence number, tag.
pub const OVERHEAD: usize = 24 + 8 + 16;

/// Length of a memcached key name.
pub const NAME_LEN: usize = 2 + 32;

/// A memcached key and the 64-bit hash the pool ranks servers by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyName {
    pub text: String,
    pub hash: u64,
}

/// Why a value was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenError {
    /// Too short, or the tag does not verify (garbage, another key, another namespace).
    Auth,
}

/// Subkeys of one tier and its namespace.
pub struct Crypt {
    aead: XChaCha20Poly1305,
    name_key: [u8; 32],
    namespace: String,
}

impl fmt::Debug for Crypt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Crypt")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl Crypt {
    pub fn new(master: &RemoteKey, namespace: &str) -> Self {
        let seal = blake3::derive_key(SEAL_CONTEXT, master.bytes());
        Self {
            aead: XChaCha20Poly1305::new(&seal.into()),
            name_key: blake3::derive_key(NAME_CONTEXT, master.bytes()),
            namespace: namespace.to_string(),
        }
    }

    /// The memcached key of `key` at `version`.
    pub fn key_name(&self, key: &TierKey, version: u64) -> KeyName {
        let mut h = blake3::Hasher::new_keyed(&self.name_key);
        h.update(&(self.namespace.len() as u64).to_le_bytes());
        h.update(self.namespace.as_bytes());
        for v in [
            key.file.dev,
            key.file.ino,
            key.file.birth,
            key.block.0,
            version,
        ] {
            h.update(&v.to_le_bytes());
        }
        let out = h.finalize();
        let bytes = out.as_bytes();
        let mut text = String::with_capacity(NAME_LEN);
        text.push_str("tc");
        for b in &bytes[..16] {
            text.push(char::from(HEX[usize::from(b >> 4)]));
            text.push(char::from(HEX[usize::from(b & 15)]));
        }
        let mut h8 = [0u8; 8];
        h8.copy_from_slice(&bytes[16..24]);
        KeyName {
            text,
            hash: u64::from_le_bytes(h8),
        }
    }

    fn aad(&self, name: &str) -> Vec<u8> {
        let mut aad = Vec::with_capacity(AAD_LABEL.len() + 16 + self.namespace.len() + name.len());
        aad.extend_from_slice(AAD_LABEL);
        aad.extend_from_slice(&(self.namespace.len() as u64).to_le_bytes());
        aad.extend_from_slice(self.namespace.as_bytes());
        aad.extend_from_slice(&(name.len() as u64).to_le_bytes());
        aad.extend_from_slice(name.as_bytes());
        aad
    }

    /// Seals `data` with `seq` for memcached key `name`.
    pub fn seal(&self, name: &str, seq: u64, data: &[u8]) -> Vec<u8> {
        let mut nonce = [0u8; 24];
        rand::thread_rng().fill_bytes(&mut nonce);
        let mut out = Vec::with_capacity(data.len() + OVERHEAD);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&seq.to_le_bytes());
        out.extend_from_slice(data);
        let tag = self
            .aead
            .encrypt_in_place_detached(XNonce::from_slice(&nonce), &self.aad(name), &mut out[24..])
            // Only fails for a message beyond XChaCha20's 256 GiB limit; blocks are far smaller.
            .expect("a block is within the cipher's message size limit");
        out.extend_from_slice(&tag);
        out
    }

    /// Verifies and decrypts a value read under `name`: its `seq` and the block (in place).
    pub fn open(&self, name: &str, mut value: Vec<u8>) -> Result<(u64, Vec<u8>), OpenError> {
        if value.len() < OVERHEAD {
            return Err(OpenError::Auth);
        }
        let tag_at = value.len() - 16;
        let tag = Tag::clone_from_slice(&value[tag_at..]);
        let mut nonce = [0u8; 24];
        nonce.copy_from_slice(&value[..24]);
        self.aead
            .decrypt_in_place_detached(
                XNonce::from_slice(&nonce),
                &self.aad(name),
                &mut value[24..tag_at],
                &tag,
            )
            .map_err(|_| OpenError::Auth)?;
        let mut s = [0u8; 8];
        s.copy_from_slice(&value[24..32]);
        value.truncate(tag_at);
        value.drain(..32);
        Ok((u64::from_le_bytes(s), value))
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

#[cfg(test)]
mod tests {
    use super::*;
    use tiercache_tier::FileKey;

    fn key(block: u64) -> TierKey {
        TierKey::new(
            FileKey {
                dev: 1,
                ino: 2,
                birth: 3,
            },
            block,
        )
    }

    #[test]
    fn seal_open_round_trip_and_binding() {
        let master = RemoteKey::random();
        let a = Crypt::new(&master, "a");
        let b = Crypt::new(&master, "b");
        let na = a.key_name(&key(7), 1);
        assert_eq!(na.text.len(), NAME_LEN);
        assert!(crate::proto::valid_key(&na.text));
        assert_ne!(na, b.key_name(&key(7), 1), "namespaces name keys apart");
        assert_ne!(na, a.key_name(&key(7), 2), "versions name keys apart");
        assert_ne!(na, a.key_name(&key(8), 1));
        let data: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
        let v = a.seal(&na.text, 42, &data);
        assert_eq!(v.len(), data.len() + OVERHEAD);
        assert_eq!(a.open(&na.text, v.clone()), Ok((42, data.clone())));
        // Another key, another namespace, another master key, a flipped bit: refused.
        let other = a.key_name(&key(8), 1);
        assert_eq!(a.open(&other.text, v.clone()), Err(OpenError::Auth));
        assert_eq!(b.open(&na.text, v.clone()), Err(OpenError::Auth));
        let c = Crypt::new(&RemoteKey::random(), "a");
        assert_eq!(c.open(&na.text, v.clone()), Err(OpenError::Auth));
        for i in [0, 30, 100, v.len() - 1] {
            let mut bad = v.clone();
            bad[i] ^= 1;
            assert_eq!(a.open(&na.text, bad), Err(OpenError::Auth), "byte {i}");
        }
        assert_eq!(a.open(&na.text, vec![0; 10]), Err(OpenError::Auth));
    }
}
