//! Where and how to reach DynamoDB.

use aws_config::retry::RetryConfig;
use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_dynamodb::config::Credentials;

use crate::error::TableError;

/// Connection options. Anything left unset comes from the standard AWS
/// environment: `AWS_REGION` / profile for the region, the default
/// credential chain, and `AWS_ENDPOINT_URL` (or
/// `AWS_ENDPOINT_URL_DYNAMODB`) for the endpoint.
#[derive(Debug, Clone)]
pub struct DynamoOptions {
    /// The endpoint URL, e.g. a local DynamoDB-compatible server.
    pub endpoint: Option<String>,
    /// The region.
    pub region: Option<String>,
    /// Static credentials `(access key id, secret)` instead of the chain.
    pub credentials: Option<(String, String)>,
    /// Attempts per request, first one included, before a throttled or
    /// transiently failed request gives up (exponential backoff with jitter
    /// between them). Default 8.
    pub max_attempts: u32,
    /// The base of the exponential backoff between attempts. Default 25 ms,
    /// the base DynamoDB's own clients use.
    pub initial_backoff: std::time::Duration,
}

impl Default for DynamoOptions {
    fn default() -> Self {
        Self {
            endpoint: None,
            region: None,
            credentials: None,
            max_attempts: 8,
            initial_backoff: std::time::Duration::from_millis(25),
        }
    }
}

impl DynamoOptions {
    /// Everything from the environment.
    pub fn from_env() -> Self {
        Self::default()
    }

    /// Uses this endpoint URL.
    pub fn endpoint(mut self, url: impl Into<String>) -> Self {
        self.endpoint = Some(url.into());
        self
    }

    /// Uses this region.
    pub fn region(mut self, region: impl Into<String>) -> Self {
        self.region = Some(region.into());
        self
    }

    /// Uses static credentials (a local test server accepts any).
    pub fn credentials(
        mut self,
        access_key_id: impl Into<String>,
        secret: impl Into<String>,
    ) -> Self {
        self.credentials = Some((access_key_id.into(), secret.into()));
        self
    }

    /// Sets the attempts per request (at least 1).
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// Loads the SDK configuration. Without a region anywhere, a custom
    /// endpoint gets `us-east-1` (local servers ignore it); otherwise it is
    /// a [`TableError::Misconfigured`].
    pub async fn sdk_config(&self) -> Result<SdkConfig, TableError> {
        let mut loader = aws_config::defaults(BehaviorVersion::latest()).retry_config(
            RetryConfig::standard()
                .with_max_attempts(self.max_attempts.max(1))
                .with_initial_backoff(self.initial_backoff),
        );
        if let Some(region) = &self.region {
            loader = loader.region(Region::new(region.clone()));
        }
        if let Some(endpoint) = &self.endpoint {
            loader = loader.endpoint_url(endpoint);
        }
        if let Some((id, secret)) = &self.credentials {
            loader = loader.credentials_provider(Credentials::new(
                id.clone(),
                secret.clone(),
                None,
                None,
                "eddy-static",
            ));
        }
        let config = loader.load().await;
        if config.region().is_some() {
            return Ok(config);
        }
        if config.endpoint_url().is_some() {
            return Ok(config
                .into_builder()
                .region(Region::new("us-east-1"))
                .build());
        }
        Err(TableError::Misconfigured {
            message: "no AWS region is configured: set AWS_REGION (or a profile's region) or pass a region".into(),
        })
    }
}
