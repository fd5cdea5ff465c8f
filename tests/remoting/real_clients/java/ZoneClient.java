// A 5.3.3 producer then a consumer (DefaultMQProducer, DefaultLitePullConsumer) on one NameServer;
// zone mode comes from -Drocketmq.zone.mode / -Drocketmq.zone (DynamicalExtFieldRPCHook).
// Prints, per broker name, how many messages were sent to it and how many were consumed from it.
//   java-main ZoneClient.java NAMESRV TOPIC COUNT GROUP
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

public class ZoneClient {
    public static void main(String[] args) throws Exception {
        String namesrv = args[0], topic = args[1], group = args[3];
        int count = Integer.parseInt(args[2]);
        DefaultMQProducer producer = new DefaultMQProducer("P_" + group);
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName("p-" + group);
        producer.start();
        Map<String, Integer> sent = new TreeMap<>();
        for (int i = 0; i < count; i++) {
            SendResult r = producer.send(new Message(topic, ("m" + i).getBytes()));
            sent.merge(r.getMessageQueue().getBrokerName(), 1, Integer::sum);
        }
        producer.shutdown();
        System.out.println("SENT " + sent);

        DefaultLitePullConsumer consumer = new DefaultLitePullConsumer("C_" + group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName("c-" + group);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.start();
        Map<String, Integer> got = new TreeMap<>();
        int total = 0;
        long end = System.currentTimeMillis() + 60000;
        while (total < count && System.currentTimeMillis() < end) {
            List<MessageExt> msgs = consumer.poll(1000);
            for (MessageExt m : msgs) {
                got.merge(m.getBrokerName(), 1, Integer::sum);
                total++;
            }
        }
        System.out.println("CONSUMED " + got);
        consumer.shutdown();
    }
}
