//! Webhook signatures: one Ed25519 key per process, published as a JWKS.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ed25519_dalek::{Signer, SigningKey};

/// The process's webhook signing key and its key id.
pub(in crate::subscriptions) struct WebhookKey {
    key: SigningKey,
    kid: String,
}

impl WebhookKey {
    /// A fresh random key.
    pub fn generate() -> Result<Self, getrandom::Error> {
        let mut seed = [0u8; 32];
        getrandom::getrandom(&mut seed)?;
        let key = SigningKey::from_bytes(&seed);
        let kid = format!(
            "ds_{}",
            &URL_SAFE_NO_PAD.encode(key.verifying_key().as_bytes())[..16]
        );
        Ok(WebhookKey { key, kid })
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
