//! `eddy dynamo …` (feature `aws`): Amazon DynamoDB tools.
//!
//! The argument types are plain clap `Args`, so a later command group that
//! applications mount beside their own projections can reuse them.

use anyhow::bail;
use clap::{Args, Subcommand};
use eddy_dynamo::{create_table, DynamoOptions, Provisioned, TableSchema};

/// `eddy dynamo …`: Amazon DynamoDB tools.
#[derive(Debug, Args)]
pub struct DynamoArgs {
    /// The command.
    #[command(subcommand)]
    pub command: DynamoCommand,
}

/// The `eddy dynamo` commands.
#[derive(Debug, Subcommand)]
pub enum DynamoCommand {
    /// Create the single table (pk/sk, indexes, stream NEW_AND_OLD_IMAGES,
    /// TTL); does nothing when it already exists with that layout.
    CreateTable(CreateTableArgs),
}

/// Where DynamoDB is.
#[derive(Debug, Clone, Args)]
pub struct ConnectionArgs {
    /// The DynamoDB endpoint URL (a local server, e.g. moto); default: AWS.
    #[arg(long, value_name = "URL", env = "AWS_ENDPOINT_URL")]
    pub dynamodb_endpoint: Option<String>,
    /// The AWS region; default: AWS_REGION or the profile's.
    #[arg(long, value_name = "REGION")]
    pub region: Option<String>,
}

impl ConnectionArgs {
    /// The connection options these arguments describe.
    pub fn options(&self) -> DynamoOptions {
        let mut options = DynamoOptions::from_env();
        options.endpoint = self.dynamodb_endpoint.clone();
        options.region = self.region.clone();
        options
    }
}

/// `eddy dynamo create-table`.
#[derive(Debug, Args)]
pub struct CreateTableArgs {
    /// The table name (3 to 255 of a-z A-Z 0-9 _ . -).
    #[arg(long)]
    pub table: String,
    /// A global secondary index NAME with string keys NAMEpk and NAMEsk
    /// (repeatable).
    #[arg(long = "index", value_name = "NAME", default_values_t = vec!["gsi1".to_owned()])]
    pub indexes: Vec<String>,
    /// No secondary index at all.
    #[arg(long, conflicts_with = "indexes")]
    pub no_indexes: bool,
    /// The TTL attribute (epoch seconds): DynamoDB deletes an item once it
    /// passes. Only tombstones (`removal.ttl`) carry it; outbox claims
    /// never do, so pending effects survive every TTL sweep.
    #[arg(long, value_name = "ATTRIBUTE", default_value = "ttl")]
    pub ttl: String,
    /// Where DynamoDB is.
    #[command(flatten)]
    pub connection: ConnectionArgs,
}

impl CreateTableArgs {
    /// The schema of the table to create.
    pub fn schema(&self) -> anyhow::Result<TableSchema> {
        validate_table_name(&self.table)?;
        let mut schema = TableSchema::single_table(self.table.clone()).with_ttl(self.ttl.clone());
        if !self.no_indexes {
            for name in &self.indexes {
                validate_table_name(name)?;
                let (pk, sk) = (format!("{name}pk"), format!("{name}sk"));
                schema = schema.with_index(name.clone(), pk, Some(&sk));
            }
        }
        Ok(schema)
    }
}

/// DynamoDB's rule for table and index names.
fn validate_table_name(name: &str) -> anyhow::Result<()> {
    let ok = (3..=255).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    if !ok {
        bail!("{name:?} is not a valid table or index name: use 3 to 255 of a-z A-Z 0-9 _ . -");
    }
    Ok(())
}

/// Runs an `eddy dynamo` command, printing what it did on stdout.
pub async fn run(args: DynamoArgs) -> anyhow::Result<()> {
    match args.command {
        DynamoCommand::CreateTable(args) => {
            let schema = args.schema()?;
            let config = args.connection.options().sdk_config().await?;
            let client = aws_sdk_dynamodb::Client::new(&config);
            let outcome = create_table(&client, &schema).await?;
            let indexes: Vec<&str> = schema.indexes.iter().map(|i| i.name.as_str()).collect();
            let verb = match outcome {
                Provisioned::Created => "created",
                Provisioned::AlreadyExists => "already exists",
            };
            println!(
                "table {} {verb}: key pk/sk, indexes {indexes:?}, stream NEW_AND_OLD_IMAGES, ttl {}",
                schema.name, args.ttl
            );
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        command: Top,
    }

    #[derive(Subcommand)]
    enum Top {
        Dynamo(DynamoArgs),
    }

    fn parse(args: &[&str]) -> Result<CreateTableArgs, clap::Error> {
        let cli = Cli::try_parse_from(["eddy", "dynamo", "create-table"].iter().chain(args))?;
        let Top::Dynamo(DynamoArgs {
            command: DynamoCommand::CreateTable(args),
        }) = cli.command;
        Ok(args)
    }

    #[test]
    fn create_table_arguments_make_the_schema() {
        let args = parse(&[
            "--table",
            "shop",
            "--index",
            "gsi1",
            "--index",
            "byCustomer",
        ])
        .expect("arguments");
        let schema = args.schema().expect("schema");
        assert_eq!(schema.name, "shop");
        let indexes: Vec<(&str, &str)> = schema
            .indexes
            .iter()
            .map(|i| (i.name.as_str(), i.key.partition.name.as_str()))
            .collect();
        assert_eq!(
            indexes,
            [("gsi1", "gsi1pk"), ("byCustomer", "byCustomerpk")]
        );
        assert_eq!(schema.ttl_attribute.as_deref(), Some("ttl"));

        let defaults = parse(&["--table", "shop"]).expect("arguments");
        assert_eq!(defaults.schema().expect("schema").indexes.len(), 1);
        let none = parse(&["--table", "shop", "--no-indexes"]).expect("arguments");
        assert!(none.schema().expect("schema").indexes.is_empty());
    }

    #[test]
    fn bad_names_are_refused_before_any_request() {
        for bad in ["ab", "has space", "émoji"] {
            let err = parse(&["--table", bad])
                .expect("arguments")
                .schema()
                .expect_err("refused");
            assert!(
                err.to_string().contains("not a valid table"),
                "{bad}: {err}"
            );
        }
        assert!(parse(&[]).is_err(), "--table is required");
    }
}
