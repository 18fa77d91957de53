//! Webhook signatures: one Ed25519 key per store, published as a JWKS.
//!
//! The key is kept in the store's documents (the first server that needs
//! one makes it), so a receiver verifies a notification with the JWKS of
//! any server, whichever server sent it. It is never served: documents
//! are not streams.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ed25519_dalek::{Signer, SigningKey};
use eddy_streams::Documents;

use crate::subscriptions::SubscriptionError;

/// The document that keeps the store's signing key (its 32-byte seed,
/// base64url).
const KEY_DOCUMENT: &str = "webhook-signing-key";

/// The store's webhook signing key and its key id.
pub(in crate::subscriptions) struct WebhookKey {
    key: SigningKey,
    kid: String,
}

impl WebhookKey {
    /// The store's key: the one in its documents, or a fresh random one
    /// stored there (when two servers make one at once, the first stored
    /// wins and both use it).
    pub async fn shared(documents: &dyn Documents) -> Result<Self, SubscriptionError> {
        let store_failed = |e: eddy_streams::StreamError| SubscriptionError::store(&e);
        loop {
            if let Some(document) = documents.get(KEY_DOCUMENT).await.map_err(store_failed)? {
                let seed: [u8; 32] = URL_SAFE_NO_PAD
                    .decode(&document.body)
                    .ok()
                    .and_then(|seed| seed.try_into().ok())
                    .ok_or_else(|| {
                        SubscriptionError::internal("the stored webhook signing key is damaged")
                    })?;
                return Ok(WebhookKey::from_seed(&seed));
            }
            let mut seed = [0u8; 32];
            getrandom::getrandom(&mut seed).map_err(|e| {
                SubscriptionError::internal(format!("no randomness for the signing key: {e}"))
            })?;
            let body = URL_SAFE_NO_PAD.encode(seed).into_bytes().into();
            if documents
                .put(KEY_DOCUMENT, None, body)
                .await
                .map_err(store_failed)?
                .is_some()
            {
                return Ok(WebhookKey::from_seed(&seed));
            }
        }
    }

    fn from_seed(seed: &[u8; 32]) -> Self {
        let key = SigningKey::from_bytes(seed);
        let kid = format!(
            "ds_{}",
            &URL_SAFE_NO_PAD.encode(key.verifying_key().as_bytes())[..16]
        );
        WebhookKey { key, kid }
    }

    /// The key id receivers look up in the JWKS.
    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The public key as a JSON Web Key Set.
    pub fn jwks(&self) -> serde_json::Value {
        serde_json::json!({
            "keys": [{
                "kty": "OKP",
                "crv": "Ed25519",
                "x": URL_SAFE_NO_PAD.encode(self.key.verifying_key().as_bytes()),
                "kid": self.kid,
                "use": "sig",
                "alg": "EdDSA",
            }]
        })
    }

    /// The `webhook-signature` header for `body` sent at unix time `t`:
    /// `t=<t>,kid=<kid>,ed25519=<base64url signature of "<t>.<body>">`.
    pub fn signature(&self, t: u64, body: &[u8]) -> String {
        let mut message = format!("{t}.").into_bytes();
        message.extend_from_slice(body);
        let signature = self.key.sign(&message);
        format!(
            "t={t},kid={},ed25519={}",
            self.kid,
            URL_SAFE_NO_PAD.encode(signature.to_bytes())
        )
    }
}
