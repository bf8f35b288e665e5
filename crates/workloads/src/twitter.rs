//! C-Twitter (Cobra §6): a simple clone of Twitter. Users tweet, follow and unfollow other users, and read
//! their timeline (the latest tweets of the users they follow). Users are chosen by a Zipfian distribution.
//!
//! The mix is 50% timeline, 30% tweet, 10% follow and 10% unfollow; the paper does not give one. It gives
//! the Zipfian parameter as "α = 100" without saying how it is scaled, so this uses exponent 0.99 (YCSB's
//! default): a few users are hot, most are not.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::schema::{TableDef, int, text};
use crate::{Row, StoreError, Txn, TxnEnd, Val, Zipf, filler, pick, read_existing};

/// `tw_user(uid, name, tweet_count)`.
pub static USER: TableDef =
    TableDef { name: "tw_user", columns: &[int("uid"), text("name"), int("tweet_count")], pk_len: 1 };
/// `tw_tweet(uid, seq, body)`: a user's `seq`-th tweet.
pub static TWEET: TableDef =
    TableDef { name: "tw_tweet", columns: &[int("t_uid"), int("t_seq"), text("body")], pk_len: 2 };
/// `tw_following(uid, followees)`: whom a user follows, as a comma-separated list of user ids.
pub static FOLLOWING: TableDef =
    TableDef { name: "tw_following", columns: &[int("f_uid"), text("followees")], pk_len: 1 };

/// The tables of C-Twitter.
pub static TABLES: &[&TableDef] = &[&USER, &TWEET, &FOLLOWING];

/// The transaction mix, in percent.
pub const MIX: &[(&str, u32)] = &[("timeline", 50), ("tweet", 30), ("follow", 10), ("unfollow", 10)];

/// Default number of users (Cobra §6).
pub const DEFAULT_USERS: u64 = 1000;
/// The Zipfian exponent of the choice of users.
pub const ZIPF_EXPONENT: f64 = 0.99;
/// A user follows at most this many others; a follow beyond it changes nothing.
pub const MAX_FOLLOWING: usize = 32;
/// A timeline shows the latest tweets of at most this many followees.
pub const TIMELINE_FOLLOWEES: usize = 10;
/// Tweets per followee on a timeline.
pub const TIMELINE_TWEETS: i64 = 2;
/// Characters in a tweet.
pub const TWEET_LEN: usize = 140;

/// The C-Twitter workload.
#[derive(Clone, Debug, PartialEq)]
pub struct Twitter {
    /// Users `0..users`.
    pub users: u64,
    zipf: Zipf,
}

/// One C-Twitter transaction.
#[derive(Clone, Debug, PartialEq)]
pub enum Spec {
    /// `user` reads the latest tweets of the users it follows.
    Timeline {
        /// The reader.
        user: i64,
    },
    /// `user` posts a tweet.
    Tweet {
        /// The author.
        user: i64,
        /// Varies the text.
        text_seed: i64,
    },
    /// `user` follows `other`.
    Follow {
        /// The follower.
        user: i64,
        /// The followee.
        other: i64,
    },
    /// `user` unfollows the `which`-th (modulo its count) of the users it follows.
    Unfollow {
        /// The follower.
        user: i64,
        /// Which followee to drop.
        which: u32,
    },
}

impl Spec {
    /// The transaction type.
    pub fn kind(&self) -> &'static str {
        match self {
            Spec::Timeline { .. } => "timeline",
            Spec::Tweet { .. } => "tweet",
            Spec::Follow { .. } => "follow",
            Spec::Unfollow { .. } => "unfollow",
        }
    }
}

fn parse_list(row: &[Val]) -> Result<Vec<i64>, StoreError> {
    let s =
        row.get(1).ok_or_else(|| StoreError::Data("tw_following: short row".into()))?.text("followees")?;
    s.split(',')
        .filter(|p| !p.is_empty())
        .map(|p| p.parse::<i64>().map_err(|_| StoreError::Data(format!("tw_following: bad user id {p:?}"))))
        .collect()
}

fn format_list(list: &[i64]) -> String {
    list.iter().map(i64::to_string).collect::<Vec<_>>().join(",")
}

impl Twitter {
    /// C-Twitter with `users` users (default 1,000).
    pub fn new(users: Option<u64>) -> Self {
        let users = users.unwrap_or(DEFAULT_USERS).max(2);
        Twitter { users, zipf: Zipf::new(users, ZIPF_EXPONENT) }
    }

    /// Everyone starts following three users, so that early timelines are not empty.
    fn initial_following(&self, u: i64) -> Vec<i64> {
        let n = self.users as i64;
        let mut list: Vec<i64> =
            [(u * 7 + 1) % n, (u * 13 + 2) % n, (u * 31 + 3) % n].into_iter().filter(|&f| f != u).collect();
        list.sort_unstable();
        list.dedup();
        list
    }

    pub(crate) fn initial_row(&self, table: &TableDef, pk: &[Val]) -> Option<Row> {
        use Val::{Int, Text};
        match (table.name, pk) {
            ("tw_user", [Int(u)]) if (0..self.users as i64).contains(u) => {
                Some(vec![Int(*u), Text(format!("user{u}")), Int(0)])
            }
            ("tw_following", [Int(u)]) if (0..self.users as i64).contains(u) => {
                Some(vec![Int(*u), Text(format_list(&self.initial_following(*u)))])
            }
            _ => None,
        }
    }

    pub(crate) fn initial_keys(&self, table: &TableDef) -> Box<dyn Iterator<Item = Vec<Val>> + '_> {
        match table.name {
            "tw_user" | "tw_following" => Box::new((0..self.users as i64).map(|u| vec![Val::Int(u)])),
            _ => Box::new(std::iter::empty()),
        }
    }

    fn user(&self, rng: &mut ChaCha8Rng) -> i64 {
        self.zipf.sample(rng) as i64
    }

    pub(crate) fn next_txn(&self, rng: &mut ChaCha8Rng) -> Spec {
        let user = self.user(rng);
        match pick(rng, MIX) {
            "timeline" => Spec::Timeline { user },
            "tweet" => Spec::Tweet { user, text_seed: rng.gen_range(0..1 << 30) },
            "follow" => {
                let mut other = self.user(rng);
                if other == user {
                    other = (other + 1) % self.users as i64;
                }
                Spec::Follow { user, other }
            }
            _ => Spec::Unfollow { user, which: rng.r#gen() },
        }
    }

    pub(crate) async fn execute<T: Txn>(&self, t: &mut T, spec: &Spec) -> Result<TxnEnd, StoreError> {
        use Val::{Int, Text};
        match *spec {
            Spec::Timeline { user } => {
                let following = read_existing(t, &FOLLOWING, &[Int(user)]).await?;
                for f in parse_list(&following)?.into_iter().take(TIMELINE_FOLLOWEES) {
                    let Some(author) = t.read(&USER, &[Int(f)]).await? else { continue };
                    let count = author.get(2).map_or(Ok(0), |v| v.int("tweet_count"))?;
                    for seq in ((count - TIMELINE_TWEETS + 1).max(1)..=count).rev() {
                        t.read(&TWEET, &[Int(f), Int(seq)]).await?;
                    }
                }
            }
            Spec::Tweet { user, text_seed } => {
                // The counter row is written before the tweet is inserted, so that two concurrent tweets by
                // one user conflict on the counter (a serialization failure) rather than on the new key.
                let mut author = read_existing(t, &USER, &[Int(user)]).await?;
                let seq = author.get(2).map_or(Ok(0), |v| v.int("tweet_count"))? + 1;
                author[2] = Int(seq);
                t.update(&USER, author).await?;
                t.insert(&TWEET, vec![Int(user), Int(seq), Text(filler(text_seed, TWEET_LEN))]).await?;
            }
            Spec::Follow { user, other } => {
                let following = read_existing(t, &FOLLOWING, &[Int(user)]).await?;
                let mut list = parse_list(&following)?;
                if !list.contains(&other) && list.len() < MAX_FOLLOWING {
                    list.push(other);
                    list.sort_unstable();
                    t.update(&FOLLOWING, vec![Int(user), Text(format_list(&list))]).await?;
                }
            }
            Spec::Unfollow { user, which } => {
                let following = read_existing(t, &FOLLOWING, &[Int(user)]).await?;
                let mut list = parse_list(&following)?;
                if !list.is_empty() {
                    list.remove(which as usize % list.len());
                    t.update(&FOLLOWING, vec![Int(user), Text(format_list(&list))]).await?;
                }
            }
        }
        Ok(TxnEnd::Commit)
    }
}
