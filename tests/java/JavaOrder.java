// What Java's hash tables iterate, for tests/test_java_order.py: one case a line on stdin,
// "<kind>\t<name>\t<name>...", answered by one line of tab-separated names (hashes for
// "hash"). Kinds: hash (String.hashCode, unsigned), map (HashMap<>() put in order), set
// (new HashSet<>(that map's keySet()), as RocketMQ 5.3.3's pickupTopicRouteData copies it),
// chm128 and chm32 (new ConcurrentHashMap<>(n) put in order).
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.*;
import java.util.concurrent.ConcurrentHashMap;

public class JavaOrder {
    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        PrintStream out = new PrintStream(System.out, true, "UTF-8");
        for (String line; (line = in.readLine()) != null; ) {
            String[] f = line.split("\t", -1);
            List<String> names = Arrays.asList(f).subList(1, f.length);
            Map<String, Integer> map = f[0].equals("chm128") ? new ConcurrentHashMap<>(128)
                : f[0].equals("chm32") ? new ConcurrentHashMap<>(32) : new HashMap<>();
            for (String n : names) map.put(n, 0);
            Collection<String> keys = f[0].equals("set") ? new HashSet<>(map.keySet()) : map.keySet();
            List<String> shown = new ArrayList<>();
            if (f[0].equals("hash")) for (String n : names) shown.add(Integer.toUnsignedString(n.hashCode()));
            else shown.addAll(keys);
            out.println(String.join("\t", shown));
        }
    }
}
