// One route read over RocketMQ's protocol by RocketMQ's own Java remoting client (4.9.8's
// NettyRemotingClient, as MQClientAPIImpl.getTopicRouteInfoFromNameServer sends it): TLS
// when started with -Dtls.enable=true, as ClientConfig.useTLS defaults to it. Prints
// "ROUTE <broker names>" or "CODE <code> <remark>"; a failure to connect is an exception.
//
//   java -cp "DIR/lib/*" RouteRead.java 127.0.0.1:9876 TopicA
import org.apache.rocketmq.common.protocol.RequestCode;
import org.apache.rocketmq.common.protocol.ResponseCode;
import org.apache.rocketmq.common.protocol.header.namesrv.GetRouteInfoRequestHeader;
import org.apache.rocketmq.common.protocol.route.BrokerData;
import org.apache.rocketmq.common.protocol.route.TopicRouteData;
import org.apache.rocketmq.remoting.netty.NettyClientConfig;
import org.apache.rocketmq.remoting.netty.NettyRemotingClient;
import org.apache.rocketmq.remoting.netty.TlsSystemConfig;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;

public class RouteRead {
    public static void main(String[] args) throws Exception {
        NettyClientConfig config = new NettyClientConfig();
        config.setUseTLS(TlsSystemConfig.tlsEnable);
        NettyRemotingClient client = new NettyRemotingClient(config);
        client.start();
        try {
            GetRouteInfoRequestHeader header = new GetRouteInfoRequestHeader();
            header.setTopic(args[1]);
            RemotingCommand request = RemotingCommand.createRequestCommand(RequestCode.GET_ROUTEINFO_BY_TOPIC, header);
            RemotingCommand response = client.invokeSync(args[0], request, 10000);
            if (response.getCode() != ResponseCode.SUCCESS) {
                System.out.println("CODE " + response.getCode() + " " + response.getRemark());
                return;
            }
            TopicRouteData route = TopicRouteData.decode(response.getBody(), TopicRouteData.class);
            StringBuilder names = new StringBuilder("ROUTE");
            for (BrokerData broker : route.getBrokerDatas()) {
                names.append(' ').append(broker.getBrokerName());
            }
            System.out.println(names);
        } finally {
            client.shutdown();
        }
    }
}
