package io.quotapipeline.callback;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

import org.junit.jupiter.api.Test;

class QuotaWindowsTest {
    @Test
    void onlyACutOpensANewWindow() {
        QuotaWindows windows = new QuotaWindows();
        assertEquals(0, windows.epoch(1000.0));
        assertEquals(0, windows.epoch(1000.0));
        assertEquals(1, windows.epoch(500.0));
        assertEquals(1, windows.epoch(2000.0), "raising the limit keeps the window");
        assertEquals(2, windows.epoch(1999.0));
    }

    @Test
    void requestThreadsThatSeeOneCutTogetherOpenOneWindow() throws Exception {
        QuotaWindows windows = new QuotaWindows();
        windows.epoch(1000.0);
        ExecutorService pool = Executors.newFixedThreadPool(8);
        CountDownLatch start = new CountDownLatch(1);
        Set<Long> seen = ConcurrentHashMap.newKeySet();
        for (int i = 0; i < 64; i++) {
            pool.execute(() -> {
                try {
                    start.await();
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
                seen.add(windows.epoch(10.0));
            });
        }
        start.countDown();
        pool.shutdown();
        pool.awaitTermination(10, TimeUnit.SECONDS);
        assertEquals(Set.of(1L), seen);
    }
}
