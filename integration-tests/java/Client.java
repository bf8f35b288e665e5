// A pgjdbc client for proxy_pgjdbc.rs (run as a single source file: java -cp postgresql.jar Client.java):
// transactions, server-side prepared statements (prepareThreshold=1), a batch (pgjdbc pipelines its
// Bind/Execute messages under one Sync), an error in the middle of a pipelined batch, and a cancel that
// pgjdbc sends on a new connection with the cancel key the proxy handed out.
import java.sql.BatchUpdateException;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;

public class Client {
    public static void main(String[] args) throws Exception {
        String url = "jdbc:postgresql://127.0.0.1:" + args[0] + "/" + args[2]
            + "?user=postgres&sslmode=disable&prepareThreshold=1";
        String t = args[1];
        try (Connection c = DriverManager.getConnection(url)) {
            try (Statement s = c.createStatement()) {
                s.execute("drop table if exists " + t);
                s.execute("create table " + t + " (id int primary key, v int not null)");
            }
            c.setAutoCommit(false);
            c.setTransactionIsolation(Connection.TRANSACTION_SERIALIZABLE);
            try (PreparedStatement ins = c.prepareStatement("insert into " + t + " values (?, ?)")) {
                for (int i = 0; i < 10; i++) {
                    ins.setInt(1, i);
                    ins.setInt(2, i * 10);
                    ins.executeUpdate();
                }
            }
            c.commit();
            int sum = 0;
            try (PreparedStatement read = c.prepareStatement("select v from " + t + " where id = ?")) {
                for (int i = 0; i < 10; i++) {
                    read.setInt(1, i);
                    try (ResultSet r = read.executeQuery()) {
                        r.next();
                        sum += r.getInt(1);
                    }
                }
                c.commit();
                System.out.println("sum " + sum);
                // Read-modify-writes, one transaction each.
                try (PreparedStatement upd = c.prepareStatement("update " + t + " set v = ? where id = ?")) {
                    for (int i = 0; i < 3; i++) {
                        read.setInt(1, i);
                        int v;
                        try (ResultSet r = read.executeQuery()) {
                            r.next();
                            v = r.getInt(1);
                        }
                        upd.setInt(1, v + 1);
                        upd.setInt(2, i);
                        upd.executeUpdate();
                        c.commit();
                    }
                    // A batch: three updates pipelined under one Sync.
                    for (int i = 3; i < 6; i++) {
                        upd.setInt(1, 100 + i);
                        upd.setInt(2, i);
                        upd.addBatch();
                    }
                    int[] counts = upd.executeBatch();
                    c.commit();
                    System.out.println("batch " + counts.length);
                }
            }
            // An error in the middle of a pipelined batch: the second insert collides, the rest is skipped.
            try (PreparedStatement ins = c.prepareStatement("insert into " + t + " values (?, ?)")) {
                for (int id : new int[] {20, 5, 21}) {
                    ins.setInt(1, id);
                    ins.setInt(2, 1);
                    ins.addBatch();
                }
                ins.executeBatch();
                System.out.println("batch with a duplicate succeeded");
            } catch (BatchUpdateException e) {
                SQLException cause = e.getNextException();
                String state = cause != null ? cause.getSQLState() : e.getSQLState();
                if ("23505".equals(state)) {
                    System.out.println("dup rejected");
                } else {
                    System.out.println("batch error " + state);
                }
                c.rollback();
            }
            c.setAutoCommit(true);
            try (Statement s = c.createStatement(); ResultSet r = s.executeQuery("select count(*) from " + t)) {
                r.next();
                System.out.println("count " + r.getInt(1));
            }
            // A cancel: pgjdbc opens a new connection and sends the session's cancel key.
            try (Statement s = c.createStatement()) {
                Thread canceller = new Thread(() -> {
                    try {
                        Thread.sleep(300);
                        s.cancel();
                    } catch (Exception e) {
                        System.out.println("cancel failed " + e);
                    }
                });
                canceller.start();
                try {
                    s.executeQuery("select pg_sleep(10)");
                    System.out.println("finished");
                } catch (SQLException e) {
                    System.out.println("57014".equals(e.getSQLState()) ? "cancelled" : "error " + e.getSQLState());
                }
                canceller.join();
            }
            try (Statement s = c.createStatement(); ResultSet r = s.executeQuery("select 7")) {
                r.next();
                System.out.println("after cancel " + r.getInt(1));
            }
        }
    }
}
